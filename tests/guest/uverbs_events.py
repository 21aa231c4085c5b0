# SPDX-License-Identifier: GPL-2.0
"""The uverbs files of this process (its device contexts, a context's asynchronous event
file, completion channels), for the tests and for the programs they start (pyverbs has no
accessor for the file descriptors)."""
import os
import select


def fds_where(pred):
    """This process's file descriptors whose /proc/self/fd link `pred` accepts, lowest
    (oldest) first."""
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if pred(os.readlink(f"/proc/self/fd/{fd}")):
                fds.append(int(fd))
        except OSError:
            pass  # Gone: the descriptor listdir read the directory with.
    return sorted(fds)


def event_fds():
    """This process's uverbs event files, oldest first: a context's asynchronous event
    file is opened with the context, before any completion channel on it."""
    return fds_where(lambda link: link == "anon_inode:[infinibandevent]")


def device_fds():
    """This process's open uverbs devices (`/dev/infiniband/uverbs*`): one per context."""
    return fds_where(lambda link: link.startswith("/dev/infiniband/uverbs"))


def readable(fd, timeout=10):
    """Waits up to `timeout` seconds until an event file has an event (blocking reads
    would hold the file open and stall device removal if the event never came)."""
    r, _, _ = select.select([fd], [], [], timeout)
    return bool(r)


def next_event(ctx, fd, timeout=10):
    """The type of the next asynchronous event of device context `ctx` (whose event file
    is `fd`), acknowledged (destroying its object waits for that); None if none came
    within `timeout` seconds."""
    if not readable(fd, timeout):
        return None
    ev = ctx.get_async_event()
    kind = ev.event_type
    ev.ack()
    return kind
