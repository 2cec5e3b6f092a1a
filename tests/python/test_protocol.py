"""The header and body codec, without an agent."""

import unittest

import msgpack

import agent_harness  # noqa: F401  (puts gpubox on sys.path when needed)
from gpubox import protocol
from gpubox.protocol import Header, Kind


class ProtocolTest(unittest.TestCase):
    def test_header_round_trip(self):
        header = Header(7, Kind.CALL, "sys.ping", 1500, 16)
        frame = protocol.encode_header(header)
        self.assertEqual(msgpack.unpackb(frame), [1, 7, 0, "sys.ping", 1500, 16])
        self.assertEqual(protocol.decode_header(frame), header)

    def test_decode_header_rejects_what_the_spec_forbids(self):
        cases = {
            "array of 6": [1, 1, 0, "m", 0],
            "version": [2, 1, 0, "m", 0, 0],
            "id": [1, 0, 0, "m", 0, 0],
            "kind": [1, 1, 6, "m", 0, 0],
            "method": [1, 1, 0, b"m", 0, 0],
            "credit": [1, 1, 0, "m", 0, -1],
        }
        for expected, fields in cases.items():
            with self.subTest(expected), self.assertRaisesRegex(ValueError, expected):
                protocol.decode_header(msgpack.packb(fields, use_bin_type=True))
        with self.assertRaisesRegex(ValueError, "msgpack"):
            protocol.decode_header(b"\xc1")

    def test_body_bytes_are_bin_and_strings_are_str(self):
        frame = protocol.encode_body({"data": b"\x00\xff", "text": "h\u00e9"})
        self.assertEqual(protocol.decode_body(frame), {"data": b"\x00\xff", "text": "h\u00e9"})
        self.assertIn(b"\xc4\x02\x00\xff", frame)  # bin 8
        self.assertEqual(protocol.encode_body({}), b"\x80")
        with self.assertRaisesRegex(ValueError, "map"):
            protocol.decode_body(msgpack.packb([1]))

    def test_error_codes_are_the_specs(self):
        self.assertEqual(len(protocol.ERROR_CODES), 14)
        self.assertIn("raised", protocol.ERROR_CODES)  # a served function raised (PROTOCOL.md, "Served functions")
        self.assertIn("deadline_exceeded", protocol.ERROR_CODES)


if __name__ == "__main__":
    unittest.main()
