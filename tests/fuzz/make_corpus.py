#!/usr/bin/env python3
"""Writes the seed corpus of each fuzz target under corpus/<target>/.

The bytes are the golden vectors of tests/unit/wire/golden_test.cpp plus a
few streams; rerun after a wire change (docs/wire.md has the layouts).
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


VERSION = 2


def frame(ptype, payload, flags=0, prio=0, upper=0, credit=0, seq=0, src=0, sport=0, dport=0,
          upper_len=0):
    return struct.pack('<BBBBBBHIIIHH', VERSION, ptype, flags, prio, upper, upper_len, credit,
                       payload, seq, src, sport, dport)


def driver_local(subtype, body):
    return frame(0x08, 8 + len(body)) + struct.pack('<HxxI', subtype, len(body)) + body


RTS = struct.pack('<QQ', 0x1122334455667788, 0x100000000)
RTR = struct.pack('<QQQB7x', 1, 0x10, 0x2000, 3) + b'\xaa\xbb\xcc' + bytes(45)
DATA = struct.pack('<QQ', 0xff, 0x0102030405060708)
ACK = struct.pack('<QB7x', 2, 2)
PUT = struct.pack('<BBBBBBBBIIIIIIQQQQQQI4x', VERSION, 1, 1, 0, 1, 0, 0, 0, 0x0a000001, 0x1234,
                  0x0a000002, 0x5678, 1000, 4, 0xdeadbeefcafef00d, 0x0102030405060708, 0x1000,
                  0x10000, 0, 0x8000000000000001, 0)
CSWAP = struct.pack('<BBBBBBBBIIIIIIQQQQQQI4x', VERSION, 5, 0, 1, 0, 12, 7, 0, 3, 0, 9, 0, 0, 0, 0x11,
                    0, 0x40, 8, 0, 0x99, 8)
# The compact form: PUT's first 40 bytes (hdr_data and offset 0), length, cookie.
COMPACT_PUT = PUT[:40] + struct.pack('<QQ', 0x10000, 0x8000000000000001)
# The tiny form: flags (logical, matching), pt_index, initiator rank, uid, match_bits.
TINY_PUT = struct.pack('<BBHIQ', 0, 4, 0x0102, 1000, 0xdeadbeefcafef00d)
# A tiny get (form 0x05: get, non-matching), then a tiny reply (form 0x1a:
# answer, physical, overflow list): op, ni_fail, pt, cookie, mlength, offset.
TINY_GET = struct.pack('<BBHIQII', 0x05, 2, 5, 1000, 0, 0x80000001, 0x10000)
TINY_REPLY = struct.pack('<BBBBIII', 0x1a, 6, 0, 7, 0x1234, 8, 0x40)
ACK_ANSWER = struct.pack('<BBBBBBBBIIIIIIQQQQQQI4x', VERSION, 7, 0, 0, 1, 0, 0, 2, 1, 2, 3, 4, 0, 0, 0,
                         0, 0, 0x100, 0x80, 0x0102, 0)
SEND = struct.pack('<BBBBHHI4xQQQ', VERSION, 1, 1, 12, 2, 0x0103, 4000, 0x0123456789abcdef, 0, 0)
# A send's compact header (the frame carries priority, ports and length).
COMPACT_SEND = struct.pack('<BBBxHHQ', VERSION, 1, 4, 0x0809, 0x0a0b, 3)
GET = struct.pack('<BBBBHHI4xQQQ', VERSION, 3, 0, 0, 1, 1, 0x10000, 0, 0x00007f0000001000, 0x42)

# The ofi driver's url (version 2, 64 KiB limit, a 12-byte name), a control
# body (bye: 7 packets sent) and rendezvous data (docs in its codec.hpp).
OFI_URL = (b'POFI' + struct.pack('<BBHQIIQII', 2, 12, 0, 0x1122334455667788, 4242, 0xabcdef01,
                                  0x0102030405060708, 65536, 0) + b'fi_sockets:1')
OFI_BODY = struct.pack('<BBBBIQQIIQ', 1, 0, 0, 0, 3, 0x1122334455667788, 0x99, 4, 0, 7)
OFI_RDV = b'PORV' + struct.pack('<IQQQ', 5, 0x7f0000001000, 0x1234, 4096)

CORPUS = {
    'fuzz_frame': [frame(0x02, 0x1234, 0x40, 1, 1, 0x0102, 0xa1b2c3d4, 7, 5, 0xbeef, 0x58),
                   frame(0x07, 0, credit=3), frame(0x05, 80), driver_local(0x0a0b, b'hello')[:24]],
    'fuzz_rts': [RTS],
    'fuzz_rtr': [RTR],
    'fuzz_data': [DATA],
    'fuzz_ack': [ACK],
    'fuzz_driver_local': [struct.pack('<HxxI', 0x0a0b, 5)],
    'fuzz_portals': [PUT, CSWAP, ACK_ANSWER, COMPACT_PUT, TINY_PUT, TINY_GET, TINY_REPLY],
    # fuzz_port: a full header, or (first byte 0xc0) routing then a compact one.
    # fuzz_ofi_codec: the first byte picks url, url view, control, rdv data.
    'fuzz_ofi_codec': [b'\x00' + OFI_URL, b'\x01' + OFI_URL, b'\x02' + driver_local(1, OFI_BODY),
                       b'\x02' + driver_local(0, OFI_BODY + OFI_URL), b'\x03' + OFI_RDV],
    'fuzz_port': [SEND, GET, b'\xc0' + struct.pack('<BHHI', 1, 2, 3, 8) + COMPACT_SEND],
    # Two control bytes (head capacity / 4, fragmentation), then a stream.
    'fuzz_stream_parser': [
        b'\x00\x07' + frame(0x02, 88 + 5, upper=1, upper_len=88) + PUT + b'hello' +
        frame(0x07, 0, credit=1) + frame(0x02, 16 + 8, upper=2, upper_len=16) + COMPACT_SEND +
        b'8 bytes!',
        b'\x40\x01' + frame(0x04, 16 + 40, upper=2) + RTS + SEND + frame(0x05, 80) + RTR +
        frame(0x06, 16) + ACK,
        b'\x00\x33' + driver_local(0, b'') + driver_local(1, bytes(range(200)) * 3) +
        frame(0x01, 16 + 300, flags=0x10) + DATA + bytes(300),
        b'\x01\x05' + driver_local(2, b'abcdefgh' * 700),
    ],
}

for target, seeds in CORPUS.items():
    directory = os.path.join(HERE, 'corpus', target)
    os.makedirs(directory, exist_ok=True)
    for i, seed in enumerate(seeds):
        with open(os.path.join(directory, 'seed%d' % i), 'wb') as f:
            f.write(seed)
