# SPDX-License-Identifier: GPL-2.0
"""An rdma_cm listener with a type of service set before it listens, through librdmacm
(ctypes: pyverbs passes no RDMA_OPTION_ID_TOS, and perftest sets it only after it
listens). It rejects the first connection request and exits.

Usage: tos_listener.py ADDR PORT TOS
Prints "listening", then "rejected" (or "event N status S" for anything else).
"""
import ctypes
import socket
import struct
import sys

RDMA_PS_TCP = 0x0106
RDMA_OPTION_ID = 0
RDMA_OPTION_ID_TOS = 0
RDMA_CM_EVENT_CONNECT_REQUEST = 4


class CmEvent(ctypes.Structure):
    """The head of struct rdma_cm_event."""
    _fields_ = [("id", ctypes.c_void_p), ("listen_id", ctypes.c_void_p),
                ("event", ctypes.c_int), ("status", ctypes.c_int)]


def check(what, rc):
    if rc != 0:
        err = ctypes.get_errno()
        raise SystemExit(f"{what} failed: {rc} (errno {err})")


def main():
    addr, port, tos = sys.argv[1], int(sys.argv[2]), int(sys.argv[3], 0)
    cm = ctypes.CDLL("librdmacm.so.1", use_errno=True)
    cm.rdma_create_event_channel.restype = ctypes.c_void_p
    cm.rdma_create_id.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                  ctypes.c_void_p, ctypes.c_int]
    cm.rdma_set_option.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                   ctypes.c_void_p, ctypes.c_size_t]
    cm.rdma_bind_addr.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    cm.rdma_listen.argtypes = [ctypes.c_void_p, ctypes.c_int]
    cm.rdma_get_cm_event.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.POINTER(CmEvent))]
    cm.rdma_reject.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint8]
    cm.rdma_ack_cm_event.argtypes = [ctypes.POINTER(CmEvent)]
    cm.rdma_destroy_id.argtypes = [ctypes.c_void_p]
    cm.rdma_destroy_event_channel.argtypes = [ctypes.c_void_p]

    ch = cm.rdma_create_event_channel()
    if not ch:
        raise SystemExit("rdma_create_event_channel failed")
    lid = ctypes.c_void_p()
    check("rdma_create_id", cm.rdma_create_id(ch, ctypes.byref(lid), None, RDMA_PS_TCP))
    t = ctypes.c_uint8(tos)
    check("rdma_set_option(TOS)",
          cm.rdma_set_option(lid, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, ctypes.byref(t), 1))
    sin = ctypes.create_string_buffer(struct.pack("=H", socket.AF_INET)
                                      + struct.pack("!H", port) + socket.inet_aton(addr)
                                      + bytes(8))
    check("rdma_bind_addr", cm.rdma_bind_addr(lid, sin))
    check("rdma_listen", cm.rdma_listen(lid, 1))
    print("listening", flush=True)
    ev = ctypes.POINTER(CmEvent)()
    check("rdma_get_cm_event", cm.rdma_get_cm_event(ch, ctypes.byref(ev)))
    kind, status, new_id = ev.contents.event, ev.contents.status, ev.contents.id
    if kind == RDMA_CM_EVENT_CONNECT_REQUEST:
        check("rdma_reject", cm.rdma_reject(new_id, None, 0))
        print("rejected", flush=True)
    else:
        print(f"event {kind} status {status}", flush=True)
    # Acknowledging the request lets the new id go with it; then the listener.
    cm.rdma_ack_cm_event(ev)
    if kind == RDMA_CM_EVENT_CONNECT_REQUEST:
        cm.rdma_destroy_id(new_id)
    cm.rdma_destroy_id(lid)
    cm.rdma_destroy_event_channel(ch)


if __name__ == "__main__":
    main()
