/*
 * abi.c — checks that sockopt_ext.h and libexsock.so agree.
 *
 * stdout: one "name value" line per constant, struct size, field offset and field size of the
 * public interface, e.g.
 *     SOL_DDP 25976
 *     sizeof.ddp_conn_info 104
 *     offsetof.ddp_conn_info.bytes_tx 32
 *     sizeof.ddp_conn_info.bytes_tx 8
 * A Rust test can produce the same table from the library's own definitions and compare.
 *
 * Self-checks (compile time): the documented layout, with fixed expected offsets (natural
 * alignment, LP64), as _Static_asserts; constants distinct where they must be.
 * Run time (stderr): the presence probe, and — once the library exports it — a comparison with
 * the library's own table:
 *     const char *ddp_abi_describe(void);   (proposed: a static NUL-terminated string of the
 *                                            same "name value\n" lines)
 * Every name in the library's table must be in ours with the same value, and vice versa.
 * Exit 0 if everything agrees, 1 otherwise.
 */
#define _POSIX_C_SOURCE 200809L
#include "sockopt_ext.h"

#include <errno.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

__attribute__((weak)) const char *ddp_abi_describe(void);

/* ---- compile-time layout checks ------------------------------------------------------------ */
#define AT(T, f, off) _Static_assert(offsetof(struct T, f) == (off), #T "." #f " at " #off)
#define SZ(T, f, n) _Static_assert(sizeof(((struct T *)0)->f) == (n), #T "." #f " is " #n " bytes")

AT(ddp_conn_info, mpa_rev, 0);    SZ(ddp_conn_info, mpa_rev, 1);
AT(ddp_conn_info, crc, 1);        SZ(ddp_conn_info, crc, 1);
AT(ddp_conn_info, markers_tx, 2); SZ(ddp_conn_info, markers_tx, 1);
AT(ddp_conn_info, markers_rx, 3); SZ(ddp_conn_info, markers_rx, 1);
AT(ddp_conn_info, p2p, 4);        SZ(ddp_conn_info, p2p, 1);
AT(ddp_conn_info, rtr, 5);        SZ(ddp_conn_info, rtr, 1);
AT(ddp_conn_info, initiator, 6);  SZ(ddp_conn_info, initiator, 1);
AT(ddp_conn_info, state, 7);      SZ(ddp_conn_info, state, 1);
AT(ddp_conn_info, ird, 8);        SZ(ddp_conn_info, ird, 4);
AT(ddp_conn_info, ord, 12);       SZ(ddp_conn_info, ord, 4);
AT(ddp_conn_info, mulpdu, 16);    SZ(ddp_conn_info, mulpdu, 4);
AT(ddp_conn_info, pd, 20);        SZ(ddp_conn_info, pd, 4);
AT(ddp_conn_info, term_layer, 24); SZ(ddp_conn_info, term_layer, 1);
AT(ddp_conn_info, term_etype, 25); SZ(ddp_conn_info, term_etype, 1);
AT(ddp_conn_info, term_ecode, 26); SZ(ddp_conn_info, term_ecode, 1);
AT(ddp_conn_info, term_sent, 27); SZ(ddp_conn_info, term_sent, 1);
AT(ddp_conn_info, reserved0, 28); SZ(ddp_conn_info, reserved0, 4);
/* NOTE: bytes 28..31 are implicit padding on LP64 (uint64_t aligned to 8). On i386 the
 * uint64_t fields would start at 28 (4-byte alignment inside structs): the layout differs
 * between ABIs. The asserts below pin the LP64 layout. */
#if defined(__LP64__)
AT(ddp_conn_info, bytes_tx, 32);  SZ(ddp_conn_info, bytes_tx, 8);
AT(ddp_conn_info, bytes_rx, 40);  SZ(ddp_conn_info, bytes_rx, 8);
AT(ddp_conn_info, fpdus_tx, 48);  SZ(ddp_conn_info, fpdus_tx, 8);
AT(ddp_conn_info, fpdus_rx, 56);  SZ(ddp_conn_info, fpdus_rx, 8);
AT(ddp_conn_info, placed_direct, 64); SZ(ddp_conn_info, placed_direct, 8);
AT(ddp_conn_info, reserved, 72);  SZ(ddp_conn_info, reserved, 32);
_Static_assert(sizeof(struct ddp_conn_info) == 104, "struct ddp_conn_info is 104 bytes");
_Static_assert(_Alignof(struct ddp_conn_info) == 8, "struct ddp_conn_info aligned to 8");
#endif

AT(ddp_wc, wr_id, 0);       SZ(ddp_wc, wr_id, 8);
AT(ddp_wc, status, 8);      SZ(ddp_wc, status, 4);
AT(ddp_wc, opcode, 12);     SZ(ddp_wc, opcode, 4);
AT(ddp_wc, byte_len, 16);   SZ(ddp_wc, byte_len, 4);
AT(ddp_wc, flags, 20);      SZ(ddp_wc, flags, 4);
AT(ddp_wc, inv_stag, 24);   SZ(ddp_wc, inv_stag, 4);
AT(ddp_wc, vendor_err, 28); SZ(ddp_wc, vendor_err, 4);
_Static_assert(sizeof(struct ddp_wc) == 32, "struct ddp_wc is 32 bytes, no padding");

/* values the documentation fixes */
_Static_assert(SOL_DDP == 0x6578, "SOL_DDP is 'ex'");
_Static_assert(DDP_API_VERSION == 1, "API version 1");
_Static_assert(DDP_MAX_SGE == 16, "DDP_MAX_SGE");
_Static_assert(DDP_WC_SUCCESS == 0, "success is 0");
_Static_assert((DDP_ACCESS_LOCAL_WRITE & DDP_ACCESS_REMOTE_WRITE) == 0 &&
		       (DDP_ACCESS_LOCAL_WRITE & DDP_ACCESS_REMOTE_READ) == 0 &&
		       (DDP_ACCESS_REMOTE_WRITE & DDP_ACCESS_REMOTE_READ) == 0,
	       "access bits distinct");
_Static_assert((DDP_SIGNALED & DDP_SOLICITED) == 0 && ((DDP_SIGNALED | DDP_SOLICITED) & DDP_MORE) == 0,
	       "send flags distinct");
_Static_assert((DDP_RTR_WRITE & DDP_RTR_READ) == 0 && (DDP_RTR_READ & DDP_RTR_SEND) == 0 &&
		       (DDP_RTR_WRITE & DDP_RTR_SEND) == 0,
	       "RTR bits distinct");
_Static_assert((DDP_WC_WITH_INV & DDP_WC_SOLICITED) == 0, "wc flags distinct");

/* ---- the table ------------------------------------------------------------------------------ */
struct row {
	const char *name;
	long long value;
};

#define K(c) { #c, (long long)(c) }
#define S(T) { "sizeof." #T, (long long)sizeof(struct T) }, { "alignof." #T, (long long)_Alignof(struct T) }
#define F(T, f) { "offsetof." #T "." #f, (long long)offsetof(struct T, f) }, \
		{ "sizeof." #T "." #f, (long long)sizeof(((struct T *)0)->f) }

static const struct row table[] = {
	K(SOL_DDP),
	K(DDP_MODE), K(DDP_CRC), K(DDP_MARKERS), K(DDP_MPA_REV), K(DDP_PRIVATE_DATA),
	K(DDP_PEER_PRIVATE_DATA), K(DDP_IRD), K(DDP_ORD), K(DDP_P2P), K(DDP_CONN_INFO), K(DDP_PD),
	K(DDP_ZERO_BASED_TO), K(DDP_MPA_TIMEOUT_MS), K(DDP_MARKERS_ALLOW),
	K(DDP_RTR_WRITE), K(DDP_RTR_READ), K(DDP_RTR_SEND),
	K(DDP_STATE_CONNECTING), K(DDP_STATE_RTS), K(DDP_STATE_CLOSING), K(DDP_STATE_ERROR),
	K(DDP_STATE_CLOSED),
	K(DDP_ACCESS_LOCAL_WRITE), K(DDP_ACCESS_REMOTE_WRITE), K(DDP_ACCESS_REMOTE_READ),
	K(DDP_MAX_SGE), K(DDP_QUEUE_DEPTH), K(DDP_SIGNALED), K(DDP_SOLICITED), K(DDP_MORE),
	K(DDP_WC_SUCCESS), K(DDP_WC_FLUSH_ERR), K(DDP_WC_LOC_LEN_ERR), K(DDP_WC_LOC_PROT_ERR),
	K(DDP_WC_REM_ACCESS_ERR), K(DDP_WC_REM_OP_ERR), K(DDP_WC_FATAL_ERR),
	K(DDP_WC_OP_SEND), K(DDP_WC_OP_WRITE), K(DDP_WC_OP_READ), K(DDP_WC_OP_RECV),
	K(DDP_WC_WITH_INV), K(DDP_WC_SOLICITED),
	K(DDP_API_VERSION),
	S(ddp_conn_info),
	F(ddp_conn_info, mpa_rev), F(ddp_conn_info, crc), F(ddp_conn_info, markers_tx),
	F(ddp_conn_info, markers_rx), F(ddp_conn_info, p2p), F(ddp_conn_info, rtr),
	F(ddp_conn_info, initiator), F(ddp_conn_info, state), F(ddp_conn_info, ird),
	F(ddp_conn_info, ord), F(ddp_conn_info, mulpdu), F(ddp_conn_info, pd),
	F(ddp_conn_info, term_layer), F(ddp_conn_info, term_etype), F(ddp_conn_info, term_ecode),
	F(ddp_conn_info, term_sent), F(ddp_conn_info, reserved0), F(ddp_conn_info, bytes_tx), F(ddp_conn_info, bytes_rx),
	F(ddp_conn_info, fpdus_tx), F(ddp_conn_info, fpdus_rx), F(ddp_conn_info, placed_direct),
	F(ddp_conn_info, reserved),
	S(ddp_wc),
	F(ddp_wc, wr_id), F(ddp_wc, status), F(ddp_wc, opcode), F(ddp_wc, byte_len),
	F(ddp_wc, flags), F(ddp_wc, inv_stag), F(ddp_wc, vendor_err),
};
#define NROWS (sizeof table / sizeof table[0])

static int fails;
__attribute__((format(printf, 1, 2))) static void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "abi: FAIL: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	fails++;
}

/* Compares the library's table with ours. */
static void compare_library(const char *lib)
{
	char *copy = strdup(lib);
	if (!copy) {
		fails++;
		return;
	}
	unsigned char seen[NROWS] = { 0 };
	int lines = 0;
	char *save = NULL;
	for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char name[128];
		long long v;
		if (sscanf(line, "%127s %lld", name, &v) != 2) {
			fail("library line '%s' is not 'name value'", line);
			continue;
		}
		lines++;
		size_t i;
		for (i = 0; i < NROWS; i++)
			if (!strcmp(table[i].name, name))
				break;
		if (i == NROWS) {
			fail("library has %s = %lld, the header does not", name, v);
			continue;
		}
		seen[i] = 1;
		if (table[i].value != v)
			fail("%s: header %lld, library %lld", name, table[i].value, v);
	}
	for (size_t i = 0; i < NROWS; i++)
		if (!seen[i])
			fail("header has %s = %lld, the library's table does not", table[i].name,
			     table[i].value);
	fprintf(stderr, "abi: compared %d lines of ddp_abi_describe() with the header\n", lines);
	free(copy);
}

int main(int argc, char **argv)
{
	int quiet = argc > 1 && !strcmp(argv[1], "-q");
	if (argc > 1 && !quiet) {
		fprintf(stderr, "usage: abi [-q]   (prints the header's ABI table; -q: checks only)\n");
		return 2;
	}
	/* names unique */
	for (size_t i = 0; i < NROWS; i++)
		for (size_t j = i + 1; j < NROWS; j++)
			if (!strcmp(table[i].name, table[j].name))
				fail("duplicate name %s", table[i].name);
	if (!quiet)
		for (size_t i = 0; i < NROWS; i++)
			printf("%s %lld\n", table[i].name, table[i].value);

	/* the presence probe */
	int s = socket(AF_INET, SOCK_STREAM, 0);
	int v = -1;
	socklen_t len = sizeof v;
	int r = s >= 0 ? getsockopt(s, SOL_DDP, DDP_MODE, &v, &len) : -1;
	int e = errno;
	if (ddp_available()) {
		fprintf(stderr, "abi: libexsock.so is loaded, DDP API version %d\n", ddp_version());
		if (ddp_version() != DDP_API_VERSION)
			fail("ddp_version(): library %d, header %d", ddp_version(), DDP_API_VERSION);
		if (r != 0)
			fail("getsockopt(SOL_DDP, DDP_MODE) on a TCP socket fails (%s)", strerror(e));
		else if (v != 0)
			fail("getsockopt: a new TCP socket reports DDP_MODE %d (expected 0)", v);
		if (ddp_abi_describe) {
			const char *t = ddp_abi_describe();
			if (!t)
				fail("ddp_abi_describe() returned NULL");
			else
				compare_library(t);
		} else {
			fprintf(stderr, "abi: the library does not export ddp_abi_describe() yet: "
					"header-only checks\n");
		}
	} else {
		fprintf(stderr, "abi: libexsock.so (with the DDP API) is not loaded: header-only "
				"checks; getsockopt(SOL_DDP, DDP_MODE) -> %s\n",
			r == 0 ? "0 (answered by a library without ddp_version?)"
			: e == ENOPROTOOPT ? "ENOPROTOOPT (as documented)"
			: e == EOPNOTSUPP ? "EOPNOTSUPP (Linux ip_getsockopt answers an unknown level on "
					    "AF_INET so; setsockopt and AF_INET6 give ENOPROTOOPT)"
					  : strerror(e));
		if (r == 0)
			fail("probe: getsockopt(SOL_DDP) succeeds but ddp_available() is 0");
	}
	if (s >= 0)
		close(s);
	fprintf(stderr, "abi: %zu entries, %s\n", NROWS, fails ? "MISMATCH" : "ok");
	return fails ? 1 : 0;
}
