#!/usr/bin/env python3
"""The checks of scripts/wirecheck (which documents them): tshark's passes over a capture, read
per iWARP connection and direction, and the re-check of a connection whose FPDU boundaries
tshark 4.0 lost.

usage: wirecheck.py PCAP [PORT...]
"""
import bisect
import ipaddress
import os
import re
import struct
import subprocess
import sys
import tempfile
from collections import Counter, OrderedDict

TS = ["tshark", "-n", "--disable-protocol", "rpcordma", "-o", "tcp.try_heuristic_first:TRUE",
      "-o", "tcp.desegment_tcp_streams:TRUE", "-o", "tcp.relative_sequence_numbers:TRUE",
      "-o", "tcp.analyze_sequence_numbers:TRUE", "-o", "tcp.reassemble_out_of_order:TRUE"]
FIELDS = ["frame.number", "tcp.stream", "ip.src", "ipv6.src", "tcp.srcport", "ip.dst", "ipv6.dst",
          "tcp.dstport", "tcp.len", "tcp.seq", "tcp.reassembled_in", "iwarp_mpa.req",
          "iwarp_mpa.rep", "iwarp_mpa.fpdu", "iwarp_mpa.pdlength", "iwarp_mpa.ulpdulength",
          "iwarp_mpa.marker_fpduptr", "iwarp_mpa.crc_flag", "iwarp_mpa.marker_flag",
          "iwarp_mpa.rej_flag", "iwarp_mpa.rev", "iwarp_rdma.opcode", "_ws.malformed",
          "tcp.flags.fin", "tcp.flags.reset", "tcp.analysis.keep_alive"]
NAMES = ["frame", "stream", "ipsrc", "ip6src", "sport", "ipdst", "ip6dst", "dport", "len",
         "seq", "reasm_in", "req", "rep", "fpdu", "pdlen", "ulpdulen", "markers", "crc_flag",
         "marker_flag", "rej_flag", "rev", "opcode", "malformed", "fin", "rst", "keepalive"]
OPCODES = ["Write", "Read Request", "Read Response", "Send", "Send Inv", "Send SE",
           "Send SE Inv", "Terminate"]
# problems that depend on where tshark 4.0 thinks the FPDUs are (see recheck below), and
# problems of the capture or of the traffic as such, which no re-cut can change
FRAMING, WIRE = "framing", "wire"
# tshark 4.0 loses the FPDU boundaries after a TCP segment that ends inside the first
# HEAD_MIN - 1 octets of an FPDU (its MPA heuristic needs HEAD_MIN octets to see an FPDU)
HEAD_MIN = 8
# the largest TCP payload written into a re-cut capture (an IPv4 datagram holds 65,515)
RECUT_SEG = 65000


def items(v):
    return [x for x in v.split(",") if x != ""] if v else []


def flag(v):
    return v.split(",")[0] in ("1", "True", "true")


def fpdu_len(ulen):
    """octets of an FPDU without markers: length field, ULPDU, pad to 4, CRC field"""
    return 2 + ulen + (-(2 + ulen) % 4) + 4


def tshark_passes(pcap, tmp):
    """Pass 1 (two-pass, so that tcp.reassembled_in is known): one line of fields per TCP
    frame. Pass 2: tshark states the CRC verdict only in the text of the tree ("(Good CRC32)",
    "(Bad CRC32, should be ...)"), so read the MPA detail of the frames that carry a CRC check."""
    fields, crc = os.path.join(tmp, "fields.tsv"), os.path.join(tmp, "crc.txt")
    fargs = [a for f in FIELDS for a in ("-e", f)]
    for out, args in ((fields, ["-Y", "tcp", "-T", "fields", "-E", "header=n", "-E", "separator=/t",
                                "-E", "occurrence=a", "-E", "aggregator=,"] + fargs),
                      (crc, ["-Y", "iwarp_mpa.crc_check", "-V", "-O", "iwarp_mpa"])):
        with open(out, "w") as w:
            p = subprocess.run(TS + ["-2", "-r", pcap] + args, stdout=w, stderr=subprocess.PIPE,
                               text=True)
        if p.returncode != 0:
            sys.stderr.write(p.stderr)
            sys.exit("error: wirecheck: tshark failed on %s" % pcap)
    return fields, crc


def fetch_payloads(pcap, numbers):
    """TCP payload octets of the given frames (another tshark pass, only when needed)"""
    numbers = set(numbers)
    flt = ("frame.number in {%s}" % ",".join(map(str, sorted(numbers))) if len(numbers) <= 1000
           else "tcp.len > 0")
    out = {}
    proc = subprocess.Popen(["tshark", "-n", "-r", pcap, "-Y", flt, "-T", "fields",
                             "-e", "frame.number", "-e", "tcp.payload"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in proc.stdout:
        no, _, hexdata = line.rstrip("\n").partition("\t")
        if int(no) in numbers:
            out[int(no)] = bytes.fromhex(hexdata.replace(":", ""))
    if proc.wait() != 0:
        sys.exit("wirecheck: tshark failed on %s (reading payloads)" % pcap)
    return out


class Ranges:
    """A set of stream octets: sorted, disjoint, non-touching half-open ranges."""
    def __init__(self):
        self.starts, self.ends = [], []

    def add(self, a, b):
        i = bisect.bisect_left(self.ends, a)
        j = bisect.bisect_right(self.starts, b)
        if i < j:
            a, b = min(a, self.starts[i]), max(b, self.ends[j - 1])
        self.starts[i:j] = [a]
        self.ends[i:j] = [b]

    def overlap(self, a, b):
        """How many octets of [a, b) are in the set."""
        n, i = 0, max(bisect.bisect_right(self.starts, a) - 1, 0)
        while i < len(self.starts) and self.starts[i] < b:
            n += max(0, min(b, self.ends[i]) - max(a, self.starts[i]))
            i += 1
        return n

    def holes(self, a, b):
        """The ranges of [a, b) that are not in the set."""
        out, pos = [], a
        for s, e in zip(self.starts, self.ends):
            if e <= pos:
                continue
            if s >= b:
                break
            if s > pos:
                out.append((pos, s))
            pos = max(pos, e)
        if pos < b:
            out.append((pos, b))
        return out


class Check:
    """tshark's view of one capture: the iWARP connections, their counts and the problems."""

    def __init__(self, pcap, ports, tmp):
        self.pcap, self.ports = pcap, ports
        self.problems = []  # (stream id or None, FRAMING or WIRE, message)
        fields_path, crc_path = tshark_passes(pcap, tmp)
        self.read_frames(fields_path)
        self.read_crc(crc_path)
        self.directions()
        self.payload = {}
        self.compare_copies()
        self.count()
        self.tails()
        self.coverage()

    def problem(self, sid, kind, msg):
        self.problems.append((sid, kind, msg))

    def read_frames(self, fields_path):
        self.frames = []
        for line in open(fields_path, encoding="utf-8", errors="replace"):
            cols = line.rstrip("\n").split("\t")
            cols += [""] * (len(NAMES) - len(cols))
            f = dict(zip(NAMES, cols))
            if not f["stream"]:
                continue
            f["frame"] = int(f["frame"])
            f["stream"] = int(f["stream"])
            f["len"] = int(f["len"] or 0)
            f["src"] = "%s:%s" % (f["ipsrc"] or f["ip6src"], f["sport"])
            f["dst"] = "%s:%s" % (f["ipdst"] or f["ip6dst"], f["dport"])
            f["has_mpa"] = bool(f["req"] or f["rep"] or f["fpdu"])
            # stream byte range [a, b) in relative sequence numbers (the first data octet is 1)
            f["a"] = int(f["seq"]) if f["len"] > 0 and f["seq"] else None
            f["b"] = f["a"] + f["len"] if f["a"] is not None else None
            self.frames.append(f)
        self.by_number = {f["frame"]: f for f in self.frames}
        streams = OrderedDict()
        for f in self.frames:
            streams.setdefault(f["stream"], []).append(f)
        self.iwarp = OrderedDict()
        self.other = 0
        for sid, fs in streams.items():
            if self.ports and not any(int(f["sport"]) in self.ports or int(f["dport"]) in self.ports
                                      for f in fs):
                continue
            if any(f["req"] for f in fs):
                self.iwarp[sid] = fs
            else:
                self.other += 1
                if self.ports and any(f["len"] > 0 for f in fs):
                    self.problem(sid, WIRE, "TCP stream %d (%s -> %s) on a checked port carries "
                                 "payload but no MPA Request" % (sid, fs[0]["src"], fs[0]["dst"]))

    def read_crc(self, crc_path):
        """CRC verdicts from the text of pass 2"""
        self.crc_good, self.crc_bad = Counter(), Counter()
        frame_no = None
        for line in open(crc_path, encoding="utf-8", errors="replace"):
            m = re.match(r"Frame (\d+):", line)
            if m:
                frame_no = int(m.group(1))
                continue
            if "(Good CRC32)" in line:
                self.crc_good[frame_no] += 1
            elif "Bad CRC32" in line:
                self.crc_bad[frame_no] += 1
                f = self.by_number.get(frame_no)
                if f is None or f["stream"] in self.iwarp or not self.ports:
                    self.problem(f["stream"] if f else None, FRAMING,
                                 "frame %s: Bad CRC32: %s" % (frame_no, line.strip()))

    def dissected(self, f):
        if f["has_mpa"]:
            return True
        target = self.by_number.get(int(f["reasm_in"].split(",")[-1])) if f["reasm_in"] else None
        return target is not None and target["has_mpa"]

    def directions(self):
        """Per connection and direction: which frames add stream octets (only those count), the
        octets TCP carried, the holes, the copies to compare, the octets tshark's PDUs cover."""
        self.conns = []
        for sid, fs in self.iwarp.items():
            req = next(f for f in fs if f["req"])
            c = {"sid": sid, "fs": fs, "req": req, "client": req["src"], "server": req["dst"],
                 "rep": next((f for f in fs if f["rep"]), None),
                 "rst": any(flag(f["rst"]) for f in fs), "dirs": {}, "notes": []}
            for d in ("up", "down"):
                dfs = [f for f in fs if (f["src"] == c["client"]) == (d == "up")]
                seen, done = Ranges(), Ranges()
                compare = []
                for f in dfs:
                    f["dir"] = d
                    f["new"] = 0
                    if f["a"] is None:
                        continue
                    f["new"] = f["len"] - seen.overlap(f["a"], f["b"])
                    if f["new"] < f["len"] and not (f["keepalive"] and f["len"] == 1):
                        compare.append(f)  # (a keep-alive's octet may be garbage: RFC 1122 4.2.3.6)
                    seen.add(f["a"], f["b"])
                    if self.dissected(f):
                        done.add(f["a"], f["b"])
                end = max([f["b"] for f in dfs if f["a"] is not None] or [1])
                c["dirs"][d] = {"frames": dfs, "seen": seen, "done": done, "compare": compare,
                                "total": end - 1, "holes": seen.holes(1, end),
                                "fin": any(flag(f["fin"]) for f in dfs)}
            self.conns.append(c)

    def compare_copies(self):
        """copies of the same octets: every frame that repeats octets, and the earlier frames it
        repeats, must carry the same octets"""
        need = set()
        for c in self.conns:
            for v in c["dirs"].values():
                pairs = []
                segs = sorted((f for f in v["frames"] if f["a"] is not None), key=lambda f: f["a"])
                starts = [f["a"] for f in segs]
                longest = max([f["len"] for f in segs] or [0])
                for g in v["compare"][:5000]:
                    lo = bisect.bisect_right(starts, g["a"] - longest)
                    for f in segs[lo:bisect.bisect_left(starts, g["b"])]:
                        if f["frame"] < g["frame"] and g["a"] < f["b"]:
                            pairs.append((f, g))
                            need.update((f["frame"], g["frame"]))
                v["pairs"] = pairs
        if need:
            self.payload.update(fetch_payloads(self.pcap, need))
        for c in self.conns:
            for d, who in (("up", "initiator"), ("down", "responder")):
                for f, g in c["dirs"][d]["pairs"]:
                    lo, hi = max(f["a"], g["a"]), min(f["b"], g["b"])
                    x = self.payload.get(f["frame"], b"")[lo - f["a"]:hi - f["a"]]
                    y = self.payload.get(g["frame"], b"")[lo - g["a"]:hi - g["a"]]
                    if x != y:
                        k = next((i for i in range(min(len(x), len(y))) if x[i] != y[i]), 0)
                        self.problem(c["sid"], WIRE,
                                     "frame %d: stream %d, %s's octet at relative seq %d differs "
                                     "from the copy in frame %d (0x%s, was 0x%s): a retransmission "
                                     "or overlap with other data" % (
                                         g["frame"], c["sid"], who, lo + k, f["frame"],
                                         y[k:k + 1].hex(), x[k:k + 1].hex()))

    def count(self):
        """per connection: MPA Requests/Replies, FPDUs, CRC verdicts and opcodes, each counted
        once per stream octet (a frame whose octets all came earlier adds nothing)"""
        for c in self.conns:
            sid, req, rep = c["sid"], c["req"], c["rep"]
            c["crc"] = flag(req["crc_flag"]) and rep is not None and flag(rep["crc_flag"])
            c["markers"] = flag(req["marker_flag"]) or (rep is not None and flag(rep["marker_flag"]))
            c["rejected"] = rep is not None and flag(rep["rej_flag"])
            n = c["n"] = Counter()
            c["opcodes"] = Counter()
            covered = Counter()
            for f in c["fs"]:
                n["bad"] += self.crc_bad[f["frame"]]
                if f["malformed"]:
                    self.problem(sid, FRAMING, "frame %d: malformed: %s" % (f["frame"], f["malformed"]))
                d = f["dir"]
                if f["a"] is not None and f["new"] == 0:
                    continue  # every octet of it came earlier: a retransmission or a probe
                n["good"] += self.crc_good[f["frame"]]
                n["req"] += len(items(f["req"]))
                n["rep"] += len(items(f["rep"]))
                for pd in items(f["pdlen"]):
                    covered[d] += 20 + int(pd)
                    if f["len"] > 20 + int(pd):
                        self.problem(sid, WIRE, "frame %d: %d bytes follow the MPA %s in its TCP "
                                     "segment; tshark 4.0 dissects nothing after a Request/Reply "
                                     "in the same segment (send it alone)" % (
                                         f["frame"], f["len"] - 20 - int(pd),
                                         "Request" if f["req"] else "Reply"))
                ulens = items(f["ulpdulen"])
                n["fpdu_" + d] += len(ulens)
                for u in ulens:
                    covered[d] += fpdu_len(int(u))
                covered[d] += 4 * len(items(f["markers"]))
                for op in items(f["opcode"]):
                    c["opcodes"][int(op, 0)] += 1
            for d, who in (("up", "initiator"), ("down", "responder")):
                v = c["dirs"][d]
                v["covered"] = covered[d]
                v["unchecked_from"] = None
                if v["holes"]:
                    missing = sum(b - a for a, b in v["holes"])
                    self.problem(sid, WIRE, "stream %d: %d bytes of the %s's data were not "
                                 "captured (relative seq %s): the capture is incomplete (did it "
                                 "drop packets?); nothing after relative seq %d can be checked" % (
                                     sid, missing, who,
                                     ", ".join("%d-%d" % (a, b - 1) for a, b in v["holes"][:5])
                                     + (", ..." if len(v["holes"]) > 5 else ""), v["holes"][0][0]))
                    v["unchecked_from"] = v["holes"][0][0]

    def tails(self):
        """A capture that ends inside an FPDU: the octets from the end of the last PDU tshark
        dissected must start an FPDU longer than what is left, and no PDU may have been
        dissected after them."""
        tails = [(c, d) for c in self.conns for d, v in c["dirs"].items()
                 if not v["holes"] and v["covered"] < v["total"] and not v["fin"] and not c["rst"]]
        if not tails:
            return
        want = set()
        for c, d in tails:
            v = c["dirs"][d]
            start = v["covered"] + 1
            want.update(f["frame"] for f in v["frames"]
                        if f["a"] is not None and f["a"] < start + 2 and f["b"] > start)
        self.payload.update(fetch_payloads(self.pcap, want - set(self.payload)))
        for c, d in tails:
            v = c["dirs"][d]
            start, left = v["covered"] + 1, v["total"] - v["covered"]
            head = bytearray()
            for pos in (start, start + 1):
                f = next((f for f in v["frames"] if f["a"] is not None and f["a"] <= pos < f["b"]
                          and f["frame"] in self.payload), None)
                if f is not None and pos - f["a"] < len(self.payload[f["frame"]]):
                    head.append(self.payload[f["frame"]][pos - f["a"]])
            later = any(f["has_mpa"] and f["a"] is not None and f["a"] >= start for f in v["frames"])
            if c["markers"] or later or len(head) < min(2, left):
                continue
            if left >= 2:
                ulen = int.from_bytes(head[:2], "big")
                flen = fpdu_len(ulen)
                if flen <= left:
                    continue
            else:
                ulen, flen = None, None
            v["unchecked_from"] = start
            c["notes"].append("  stream %d: the capture ends inside the %s's last FPDU (relative "
                              "seq %d, %s; %d octets captured, no FIN or RST): not checked" % (
                                  c["sid"], "initiator" if d == "up" else "responder", start,
                                  "ULPDU_LENGTH %d, %d octets" % (ulen, flen) if ulen is not None
                                  else "ULPDU_LENGTH not captured", left))

    def coverage(self):
        """every octet TCP carried is inside a PDU that tshark dissected"""
        for c in self.conns:
            sid = c["sid"]
            for d, who in (("up", "initiator"), ("down", "responder")):
                v = c["dirs"][d]
                cut = v["unchecked_from"]
                if cut is None and v["covered"] != v["total"]:
                    self.problem(sid, FRAMING, "stream %d: the %s sent %d bytes, tshark's MPA PDUs "
                                 "cover %d: unrecognised or incomplete iWARP data" % (
                                     sid, who, v["total"], v["covered"]))
                for f in v["frames"]:
                    if f["a"] is None or self.dissected(f) or (cut is not None and f["b"] > cut):
                        continue
                    if v["done"].overlap(f["a"], f["b"]) == f["len"]:
                        continue  # all of its octets are in frames that tshark dissected
                    self.problem(sid, FRAMING,
                                 "frame %d: %d bytes of TCP payload (stream %d, %s -> %s) not "
                                 "dissected as iWARP MPA: unrecognised or incomplete iWARP frame"
                                 % (f["frame"], f["len"], sid, f["src"], f["dst"])
                                 if not f["reasm_in"] else
                                 "frame %d: reassembled into frame %s, which tshark did not "
                                 "dissect as iWARP MPA" % (f["frame"], f["reasm_in"].split(",")[-1]))


# ---------------------------------------------------------------------------------------------
# The re-check. tshark 4.0's MPA dissector finds FPDUs heuristically and needs the first 8
# octets of one to recognise it. When a TCP segment ends 1 to 7 octets after an FPDU's start
# (after the rest of an FPDU that took several segments, or alone), tshark does not ask for
# the next segment: it skips those octets and takes what follows for an FPDU, so from there on
# it reports phantom Bad CRC32s, Terminates and undissected data. Linux cuts segments where
# the window and the MSS say, so a long transfer on lo hits this now and then. For such a
# connection (no holes, no differing copies, no markers) the same stream octets are written
# into a new capture with one segment per Request, Reply and FPDU, and tshark checks that
# capture: every CRC and every header is still tshark's verdict, on every octet, in the same
# order; only the segment boundaries are new. A fault in the traffic stays a fault there.


def stream_octets(c, d, payload):
    """the octets of one direction, the first copy of each (the copies were compared, except a
    keep-alive's octet, which may be garbage)"""
    v = c["dirs"][d]
    out = bytearray(v["total"])
    filled = Ranges()
    for f in v["frames"]:
        if f["a"] is None or f["frame"] not in payload:
            continue
        for a, b in filled.holes(f["a"], f["b"]):
            out[a - 1:b - 1] = payload[f["frame"]][a - f["a"]:b - f["a"]]
        filled.add(f["a"], f["b"])
    return out


def walk(data, closed):
    """the PDUs of one direction, [(start, end, kind)], kind "mpa" (Request/Reply), "fpdu" or
    "tail" (an FPDU that the capture cut short), or an error message"""
    if len(data) < 20 or not data.startswith(b"MPA ID Re"):
        return "does not start with an MPA Request/Reply"
    pos = 20 + struct.unpack_from(">H", data, 18)[0]
    units = [(0, pos, "mpa")]
    while pos < len(data):
        if len(data) - pos < 2:
            end = len(data)
        else:
            end = pos + fpdu_len(struct.unpack_from(">H", data, pos)[0])
        if end > len(data):
            if closed:
                return "its last FPDU (relative seq %d, %d octets) is cut short by the FIN or RST" % (
                    pos + 1, end - pos)
            units.append((pos, len(data), "tail"))
            break
        units.append((pos, end, "fpdu"))
        pos = end
    return units


def triggers(c, d, units):
    """relative seqs of the segment ends that fall 1 to HEAD_MIN - 1 octets into an FPDU"""
    starts = [a for a, _, k in units if k != "mpa"]
    out = []
    for f in c["dirs"][d]["frames"]:
        if f["a"] is None:
            continue
        end = f["b"] - 1  # stream offset just past the segment
        i = bisect.bisect_right(starts, end - 1) - 1
        if i >= 0 and 0 < end - starts[i] < HEAD_MIN:
            out.append(f["b"])
    return out


def ip_frame(src, dst, sport, dport, seq, ack, flags, payload):
    tcp = struct.pack(">HHIIBBHHH", sport, dport, seq % 2**32, ack % 2**32, 5 << 4, flags, 65535,
                      0, 0)
    if ":" in src:
        ip = struct.pack(">IHBB16s16s", 6 << 28, len(tcp) + len(payload), 6, 64,
                         ip_bytes(src), ip_bytes(dst))
        return b"\0" * 12 + b"\x86\xdd" + ip + tcp + payload
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp) + len(payload), 0, 0x4000, 64, 6, 0,
                     ip_bytes(src), ip_bytes(dst))
    return b"\0" * 12 + b"\x08\x00" + ip + tcp + payload


def ip_bytes(addr):
    return ipaddress.ip_address(addr).packed


def split_addr(a):
    host, _, port = a.rpartition(":")
    return host, int(port)


def recut_pcap(path, conns):
    """conns: [(conn, {direction: units}, {direction: octets})]: a capture of those connections
    with one segment per PDU (at most RECUT_SEG octets each), in the order their first octets
    were captured, relative sequence numbers as in the original"""
    frames = []  # (order key, frame)
    for n, (c, units, data) in enumerate(conns):
        ends = {"up": split_addr(c["client"]), "down": split_addr(c["server"])}
        isn = {"up": 1000000, "down": 5000000}
        first = c["fs"][0]["frame"]
        other = {"up": "down", "down": "up"}

        def seg(d, key, a, b, flags=0x18, ack=1):
            (sh, sp), (dh, dp) = ends[d], ends[other[d]]
            frames.append(((key, n, len(frames)), ip_frame(
                sh, dh, sp, dp, isn[d] + 1 + a, isn[other[d]] + ack, flags,
                bytes(data[d][max(a, 0):b]))))

        seg("up", (first, 0), -1, 0, 0x02, ack=0)  # SYN, SYN-ACK, ACK
        seg("down", (first, 1), -1, 0, 0x12)
        seg("up", (first, 2), 0, 0, 0x10)
        for d in ("up", "down"):
            segs = sorted((f for f in c["dirs"][d]["frames"] if f["a"] is not None),
                          key=lambda f: f["a"])
            starts = [f["a"] for f in segs]
            for a, b, _ in units[d]:
                # the frame that carried the PDU's first octet orders it
                i = bisect.bisect_right(starts, a + 1) - 1
                key = segs[i]["frame"] if i >= 0 else first
                for x in range(a, b, RECUT_SEG):
                    seg(d, (key, 3 + (d == "down")), x, min(b, x + RECUT_SEG))
            if c["dirs"][d]["fin"]:
                last = max(f["frame"] for f in c["dirs"][d]["frames"])
                seg(d, (last, 5), len(data[d]), len(data[d]), 0x11)
    frames.sort(key=lambda x: x[0])
    with open(path, "wb") as w:
        w.write(struct.pack("<IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, 262144, 1))
        for i, (_, fr) in enumerate(frames):
            w.write(struct.pack("<IIII", i // 1000000, i % 1000000, len(fr), len(fr)) + fr)


def recheck(first, tmp):
    """re-check the connections whose problems are all FRAMING ones, in a re-cut capture; the
    connections that pass there get its counts and a note instead of their problems"""
    kinds = {}
    for sid, kind, _ in first.problems:
        kinds.setdefault(sid, set()).add(kind)
    cands = [c for c in first.conns if kinds.get(c["sid"]) == {FRAMING}]
    if not cands:
        return {}
    want = {f["frame"] for c in cands for f in c["fs"] if f["len"] > 0} - set(first.payload)
    first.payload.update(fetch_payloads(first.pcap, want))
    plan, why = [], {}
    for c in cands:
        if c["markers"]:
            why[c["sid"]] = "markers are on"
            continue
        units, data, trig = {}, {}, {}
        for d in ("up", "down"):
            data[d] = stream_octets(c, d, first.payload)
            w = walk(data[d], c["dirs"][d]["fin"] or c["rst"])
            if isinstance(w, str):
                why[c["sid"]] = "the %s's stream: %s" % ("initiator" if d == "up" else "responder", w)
                break
            units[d] = w
            trig[d] = triggers(c, d, w)
        else:
            if not trig["up"] and not trig["down"]:
                why[c["sid"]] = ("no TCP segment ends inside the first %d octets of an FPDU, so "
                                 "this is not tshark losing the FPDU boundaries" % (HEAD_MIN - 1))
            else:
                plan.append((c, units, data, trig))
    for c in cands:
        if c["sid"] in why:
            c["notes"].append("  stream %d: not re-checked in a re-cut capture: %s" % (
                c["sid"], why[c["sid"]]))
    if not plan:
        return {}
    path = os.path.join(tmp, "recut.pcap")
    recut_pcap(path, [(c, u, d) for c, u, d, _ in plan])
    rtmp = os.path.join(tmp, "recut")
    os.mkdir(rtmp)
    second = Check(path, set(), rtmp)
    by_ends = {(c["client"], c["server"]): c for c in second.conns}
    done = {}
    for c, units, _, trig in plan:
        r = by_ends.get((c["client"], c["server"]))
        bad = [m for sid, _, m in second.problems if r is not None and sid == r["sid"]]
        fpdus = {d: sum(k == "fpdu" for _, _, k in units[d]) for d in ("up", "down")}
        if r is None or bad or r["n"]["fpdu_up"] != fpdus["up"] or r["n"]["fpdu_down"] != fpdus["down"]:
            first.problems.insert(0, (c["sid"], WIRE, "stream %d: the re-cut capture (one segment "
                                  "per FPDU) fails too: %s" % (
                                      c["sid"], "; ".join(bad[:5]) if bad else
                                      "%s FPDUs counted, %s walked" % (
                                          r and (r["n"]["fpdu_up"], r["n"]["fpdu_down"]),
                                          (fpdus["up"], fpdus["down"])))))
            continue
        done[c["sid"]] = r
        n_first = sum(1 for sid, _, _ in first.problems if sid == c["sid"])
        where = ", ".join("the %s's at relative seq %s" % (
            "initiator" if d == "up" else "responder",
            ", ".join(map(str, t[:3])) + (", ..." if len(t) > 3 else ""))
            for d, t in trig.items() if t)
        c["notes"].append("  stream %d: tshark 4.0 lost the FPDU boundaries (%d problems) after "
                          "TCP segments that end inside an FPDU's first %d octets (%s); the same "
                          "stream octets re-cut one FPDU per segment: clean, counts from there" % (
                              c["sid"], n_first, HEAD_MIN - 1, where))
        for k in ("n", "opcodes", "crc", "markers", "rejected"):
            c[k] = r[k]
    first.problems = [p for p in first.problems if p[0] not in done]
    return done


def mpa_params(f):
    if f is None:
        return "none"
    return "rev %s%s%s%s pd %s" % (
        f["rev"], " C" if flag(f["crc_flag"]) else "", " M" if flag(f["marker_flag"]) else "",
        " R" if flag(f["rej_flag"]) else "", f["pdlen"])


def report(chk):
    print("wirecheck: %s" % chk.pcap)
    total, opcodes = Counter(), Counter()
    for c in chk.conns:
        total.update(c["n"])
        opcodes.update(c["opcodes"])
        print("  stream %d: %s -> %s  request [%s]  reply [%s]  CRC %s  FPDUs %d up / %d down" % (
            c["sid"], c["client"], c["server"], mpa_params(c["req"]), mpa_params(c["rep"]),
            "on" if c["crc"] else "off", c["n"]["fpdu_up"], c["n"]["fpdu_down"]))
        if c["rep"] is None:
            print("  stream %d: no MPA Reply" % c["sid"])
        for note in c["notes"]:
            print(note)
    if total["req"] == 0 or total["rep"] == 0:
        chk.problem(None, WIRE, "no MPA Request and Reply in the capture%s (MPA is detected "
                    "heuristically: nothing to check)" % (
                        " on port(s) " + ",".join(map(str, sorted(chk.ports))) if chk.ports else ""))
    crc_conns = sum(1 for c in chk.conns if c["crc"])
    print("  connections: %d iWARP, %d other TCP (not checked)" % (len(chk.conns), chk.other))
    print("  MPA requests: %d  replies: %d  (rejected: %d)" % (
        total["req"], total["rep"], sum(1 for c in chk.conns if c["rejected"])))
    print("  FPDUs: %d  good CRCs: %d  bad CRCs: %d  CRC negotiated: %s" % (
        total["fpdu_up"] + total["fpdu_down"], total["good"], total["bad"],
        "yes" if chk.conns and crc_conns == len(chk.conns) else (
            "no" if crc_conns == 0 else "on %d of %d connections" % (crc_conns, len(chk.conns)))))
    ops = ["%s %d" % (name, opcodes.pop(i, 0)) for i, name in enumerate(OPCODES)]
    ops += ["opcode 0x%x %d" % (k, v) for k, v in sorted(opcodes.items())]
    print("  RDMAP opcodes (per DDP segment): " + ", ".join(ops))
    msgs = [m for _, _, m in chk.problems]
    for m in msgs[:50]:
        print("wirecheck: FAIL: " + m)
    if len(msgs) > 50:
        print("wirecheck: ... and %d more problems" % (len(msgs) - 50))
    if msgs:
        print("wirecheck: %s: FAILED (%d problems)" % (chk.pcap, len(msgs)))
        return 1
    print("wirecheck: %s: OK" % chk.pcap)
    return 0


def main():
    pcap, ports = sys.argv[1], {int(p) for p in sys.argv[2:]}
    with tempfile.TemporaryDirectory(prefix="wirecheck.") as tmp:
        chk = Check(pcap, ports, tmp)
        recheck(chk, tmp)
        return report(chk)


if __name__ == "__main__":
    sys.exit(main())
