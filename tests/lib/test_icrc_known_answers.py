"""The known-answer ICRCs rox-nic pins (qemu/rox-nic/tests/data/known_icrcs.txt, checked
against rox's packet builder by roce_wire.rs's icrc_known_answers) recomputed by an
implementation written apart from rox-nic: tests/host/icrc-check.py, IBA annex A17 in Python.
Both read the one file, so the packets are never copied; a pin rox got wrong fails here."""
import importlib.util
import os
import struct
import unittest

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
KNOWN = os.path.join(TOP, "qemu", "rox-nic", "tests", "data", "known_icrcs.txt")
IP_HEADER_LEN = {"ipv4": 20, "ipv6": 40}


def icrc_check():
    """tests/host/icrc-check.py as a module (its name is not an identifier)."""
    spec = importlib.util.spec_from_file_location(
        "icrc_check", os.path.join(TOP, "tests", "host", "icrc-check.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def known_packets():
    """(line, ip version, opcode, pinned ICRC, packet bytes) of every line of the file."""
    with open(KNOWN) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                version, opcode, icrc, packet = line.split()
                yield line, version, int(opcode, 16), int(icrc, 16), bytes.fromhex(packet)


class KnownIcrcs(unittest.TestCase):
    def setUp(self):
        self.icrc_of = icrc_check().icrc_of
        self.known = list(known_packets())

    def test_the_file_pins_ipv4_and_ipv6_packets_of_rc_and_ud(self):
        versions = {version for _, version, _, _, _ in self.known}
        self.assertEqual(versions, {"ipv4", "ipv6"})
        # Opcode classes (IBA 9.2: the top three bits): RC 0, UD 3.
        self.assertEqual({opcode >> 5 for _, _, opcode, _, _ in self.known}, {0, 3})

    def test_every_pinned_icrc_is_annex_a17_s(self):
        for line, version, opcode, icrc, packet in self.known:
            with self.subTest(line[:40]):
                ip_len = IP_HEADER_LEN[version]
                # The packet is what it says: its IP version, UDP 4791, the opcode in its BTH.
                self.assertEqual(packet[0] >> 4, 4 if version == "ipv4" else 6)
                self.assertEqual(struct.unpack_from("!H", packet, ip_len + 2)[0], 4791)
                self.assertEqual(packet[ip_len + 8], opcode)
                stored, = struct.unpack("<I", packet[-4:])
                self.assertEqual(stored, icrc, "the ICRC column and the packet's own disagree")
                self.assertEqual(self.icrc_of(packet[:-4], ip_len), icrc)

    def test_a_changed_byte_is_seen(self):
        # The comparison can fail: a payload byte changed gives another ICRC.
        _, version, _, icrc, packet = self.known[0]
        changed = bytearray(packet[:-4])
        changed[-1] ^= 1
        self.assertNotEqual(self.icrc_of(bytes(changed), IP_HEADER_LEN[version]), icrc)


if __name__ == "__main__":
    unittest.main()
