//! Rules that switch sockets of unmodified programs into DDP mode (`EXSOCK_RULES`,
//! `EXSOCK_CONFIG`), in the lineage of libvma.conf and libsdp.conf. `docs/rules.md` is the
//! user's manual; this module is the parser and the matcher, both pure (no system call, no
//! global state), plus [`init`], which reads the environment once in the constructor.
//!
//! ```text
//! use ddp|tcp ROLE ADDR[/PREFIX]:PORT[-PORT] [program NAME]
//! ROLE = tcp_server | tcp_client          ADDR and PORT may be *
//! ```
//!
//! Rules are separated by `;` or newlines; `#` starts a comment that runs to the end of the
//! line. IPv6 addresses are written in brackets (`[::1]:5201`, `[fd00::/8]:*`; the prefix may
//! also follow the bracket: `[fd00::]/8:*`). An endpoint of a lone `*` means `*:*`. The first
//! rule that matches decides; no match leaves the socket plain.
//!
//! Where the lineage is silent and we chose:
//! - A rule with a syntax error is reported (source, line, column, what was expected) and
//!   ignored; the other rules stay in force. The host program is never stopped for a bad rule.
//! - A server rule matches the address the socket listens on, exactly as bound: a listener on
//!   `0.0.0.0` is matched by `*`, `0.0.0.0` or a prefix containing it, not by `127.0.0.1`.
//! - IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`, dual-stack sockets) are matched as IPv4.
//! - `program NAME` matches the base name of `/proc/self/exe` or of `argv[0]` (so both
//!   `python3` and `python3.12`, or a script's interpreter and a symlink name, work).
//! - Rules from `EXSOCK_RULES` come before those of the `EXSOCK_CONFIG` file (the inline ones
//!   are the more specific, command-line setting).

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::OnceLock;

/// What a matching rule does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Switch the socket to DDP mode.
    Ddp,
    /// Leave it plain TCP (to carve exceptions out of a later, wider `ddp` rule).
    Tcp,
}

/// Which sockets a rule is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Listening sockets (matched in `listen`, on the local address); accepted sockets follow.
    Server,
    /// Connecting sockets (matched in `connect`, on the destination).
    Client,
}

/// An address set: any, or a network with a prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddrMatch {
    /// `*`.
    Any,
    /// An IPv4 network.
    V4(Ipv4Addr, u8),
    /// An IPv6 network.
    V6(Ipv6Addr, u8),
}

impl AddrMatch {
    /// Whether `a` is in the set.
    pub fn contains(&self, a: IpAddr) -> bool {
        let a = match a {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(a, IpAddr::V4),
            v4 => v4,
        };
        match (*self, a) {
            (AddrMatch::Any, _) => true,
            (AddrMatch::V4(net, p), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(p)).unwrap_or(0);
                u32::from(net) & mask == u32::from(a) & mask
            }
            (AddrMatch::V6(net, p), IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(p)).unwrap_or(0);
                u128::from(net) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// One rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// `ddp` or `tcp`.
    pub action: Action,
    /// `tcp_server` or `tcp_client`.
    pub role: Role,
    /// The address part.
    pub addr: AddrMatch,
    /// The port range, inclusive (`*` is `0..=65535`).
    pub ports: (u16, u16),
    /// `program NAME`.
    pub program: Option<String>,
    /// The rule's text, for the log.
    pub text: String,
}

/// A rule that could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line in the source.
    pub line: usize,
    /// 1-based column (bytes) of the offending token.
    pub column: usize,
    /// What was wrong.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}, column {}: {}",
            self.line, self.column, self.message
        )
    }
}

/// The rules of one source, and the errors met on the way.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// The rules that parsed, in order.
    pub rules: Vec<Rule>,
    /// One error per ignored rule.
    pub errors: Vec<ParseError>,
}

/// A token: text and 1-based column.
type Tok<'a> = (&'a str, usize);

/// Parses a rule source (the value of `EXSOCK_RULES` or the contents of the config file).
pub fn parse(src: &str) -> Parsed {
    let mut out = Parsed::default();
    for (ln, line) in src.split('\n').enumerate() {
        let line = line.split('#').next().unwrap_or("");
        let mut start = 0;
        for part in line.split(';') {
            let toks = tokens(part, start);
            start += part.len() + 1;
            if toks.is_empty() {
                continue;
            }
            match parse_rule(&toks) {
                Ok(r) => out.rules.push(r),
                Err((column, message)) => out.errors.push(ParseError {
                    line: ln + 1,
                    column,
                    message,
                }),
            }
        }
    }
    out
}

fn tokens(part: &str, offset: usize) -> Vec<Tok<'_>> {
    let mut v = Vec::new();
    let mut i = 0;
    let b = part.as_bytes();
    while i < b.len() {
        if b[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let s = i;
        while i < b.len() && !b[i].is_ascii_whitespace() {
            i += 1;
        }
        v.push((&part[s..i], offset + s + 1));
    }
    v
}

type Err = (usize, String);

fn parse_rule(t: &[Tok<'_>]) -> Result<Rule, Err> {
    let end = t.last().map_or(1, |(s, c)| c + s.len());
    let get = |i: usize, what: &str| t.get(i).copied().ok_or((end, format!("expected {what}")));
    let (kw, c) = get(0, "`use`")?;
    if kw != "use" {
        return Err((c, format!("expected `use`, found `{kw}`")));
    }
    let (a, c) = get(1, "`ddp` or `tcp`")?;
    let action = match a {
        "ddp" => Action::Ddp,
        "tcp" => Action::Tcp,
        _ => return Err((c, format!("expected `ddp` or `tcp`, found `{a}`"))),
    };
    let (r, c) = get(2, "`tcp_server` or `tcp_client`")?;
    let role = match r {
        "tcp_server" => Role::Server,
        "tcp_client" => Role::Client,
        _ => {
            return Err((
                c,
                format!("expected `tcp_server` or `tcp_client`, found `{r}`"),
            ));
        }
    };
    let (ep, c) = get(3, "ADDR[/PREFIX]:PORT[-PORT]")?;
    let (addr, ports) = parse_endpoint(ep).map_err(|(off, m)| (c + off, m))?;
    let program = match t.get(4) {
        None => None,
        Some(&("program", _)) => {
            let (name, _) = get(5, "a program name after `program`")?;
            Some(name.to_string())
        }
        Some(&(w, c)) => {
            return Err((
                c,
                format!("expected `program NAME` or the end, found `{w}`"),
            ));
        }
    };
    if let Some(&(w, c)) = t.get(6) {
        return Err((c, format!("unexpected `{w}` after the program name")));
    }
    let text = t.iter().map(|(s, _)| *s).collect::<Vec<_>>().join(" ");
    Ok(Rule {
        action,
        role,
        addr,
        ports,
        program,
        text,
    })
}

/// `ADDR[/PREFIX]:PORT[-PORT]`; errors carry the 0-based offset in `ep`.
fn parse_endpoint(ep: &str) -> Result<(AddrMatch, (u16, u16)), Err> {
    if ep == "*" {
        return Ok((AddrMatch::Any, (0, u16::MAX)));
    }
    let (addr_part, port_part, port_off) = if let Some(rest) = ep.strip_prefix('[') {
        // [v6] or [v6/len] or [v6]/len, then :PORT
        let close = rest
            .find(']')
            .ok_or((0, "an IPv6 address needs a closing `]`".to_string()))?;
        let after = &rest[close + 1..];
        let (prefix, after, extra) = match after.strip_prefix('/') {
            Some(p) => match p.find(':') {
                Some(i) => (Some(&p[..i]), &p[i..], 1 + i),
                None => (Some(p), "", 1 + p.len()),
            },
            None => (None, after, 0),
        };
        let colon_off = 1 + close + 1 + extra;
        let port = after.strip_prefix(':').ok_or((
            colon_off.min(ep.len()),
            "expected `:PORT` after the address".to_string(),
        ))?;
        let inner = &rest[..close];
        let a = match prefix {
            Some(p) if !inner.contains('/') => format!("{inner}/{p}"),
            Some(_) => return Err((1, "two prefix lengths".to_string())),
            None => inner.to_string(),
        };
        (std::borrow::Cow::Owned(a), port, colon_off + 1)
    } else {
        let colon = ep.rfind(':').ok_or((
            ep.len(),
            "expected ADDR[/PREFIX]:PORT[-PORT] (IPv6 in brackets)".to_string(),
        ))?;
        if ep[..colon].contains(':') {
            return Err((
                0,
                "an IPv6 address goes in brackets: `[ADDR]:PORT`".to_string(),
            ));
        }
        (
            std::borrow::Cow::Borrowed(&ep[..colon]),
            &ep[colon + 1..],
            colon + 1,
        )
    };
    let addr = parse_addr(&addr_part).map_err(|m| (0, m))?;
    let ports = parse_ports(port_part).map_err(|m| (port_off, m))?;
    Ok((addr, ports))
}

fn parse_addr(a: &str) -> Result<AddrMatch, String> {
    if a == "*" {
        return Ok(AddrMatch::Any);
    }
    let (ip, prefix) = match a.split_once('/') {
        Some((ip, p)) => (ip, Some(p)),
        None => (a, None),
    };
    let ip: IpAddr = ip
        .parse()
        .map_err(|_| format!("`{ip}` is not an IPv4 or IPv6 address (or `*`)"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = match prefix {
        None => max,
        Some(p) => p
            .parse::<u8>()
            .ok()
            .filter(|&l| l <= max)
            .ok_or(format!("prefix length `{p}` is not 0..={max}"))?,
    };
    Ok(match ip {
        IpAddr::V4(v4) => AddrMatch::V4(v4, len),
        IpAddr::V6(v6) => AddrMatch::V6(v6, len),
    })
}

fn parse_ports(p: &str) -> Result<(u16, u16), String> {
    if p == "*" {
        return Ok((0, u16::MAX));
    }
    let one = |s: &str| {
        s.parse::<u16>()
            .map_err(|_| format!("`{s}` is not a port (0..=65535 or `*`)"))
    };
    match p.split_once('-') {
        Some((lo, hi)) => {
            let (lo, hi) = (one(lo)?, one(hi)?);
            if lo > hi {
                return Err(format!("port range `{p}` is empty"));
            }
            Ok((lo, hi))
        }
        None => {
            let v = one(p)?;
            Ok((v, v))
        }
    }
}

/// The program's names: base names of `/proc/self/exe` and of `argv[0]`.
#[derive(Clone, Debug, Default)]
pub struct Program {
    /// Base name of `/proc/self/exe`.
    pub exe: String,
    /// Base name of `argv[0]`.
    pub argv0: String,
}

impl Program {
    fn is(&self, name: &str) -> bool {
        self.exe == name || self.argv0 == name
    }
}

/// Rules in force, in order.
#[derive(Clone, Debug, Default)]
pub struct RuleSet {
    /// All rules (inline first, then the file's).
    pub rules: Vec<Rule>,
}

impl RuleSet {
    /// The first rule matching a socket of `role` at `addr`:`port` in `program`, with its
    /// 1-based number.
    pub fn find(
        &self,
        role: Role,
        addr: IpAddr,
        port: u16,
        program: &Program,
    ) -> Option<(usize, &Rule)> {
        self.rules
            .iter()
            .enumerate()
            .find(|(_, r)| {
                r.role == role
                    && r.addr.contains(addr)
                    && (r.ports.0..=r.ports.1).contains(&port)
                    && r.program.as_deref().is_none_or(|p| program.is(p))
            })
            .map(|(i, r)| (i + 1, r))
    }
}

/// What the constructor read: the rules and the program's names.
#[derive(Debug, Default)]
pub struct Config {
    /// The rules.
    pub set: RuleSet,
    /// The program.
    pub program: Program,
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// The rules in force, if any were configured (`None`: the no-rules fast path).
#[inline]
pub fn active() -> Option<&'static Config> {
    CONFIG.get()
}

/// Reads `EXSOCK_RULES` and the `EXSOCK_CONFIG` file (from the constructor). Errors are
/// reported through `warn` as `SOURCE: line L, column C: message (rule ignored)`.
pub fn init(
    inline: Option<&str>,
    file: Option<(&str, Option<Vec<u8>>)>,
    warn: impl Fn(fmt::Arguments<'_>),
) {
    let mut set = RuleSet::default();
    let mut any = false;
    if let Some(src) = inline {
        any = true;
        let p = parse(src);
        for e in &p.errors {
            warn(format_args!("EXSOCK_RULES: {e} (rule ignored)"));
        }
        set.rules.extend(p.rules);
    }
    if let Some((path, contents)) = file {
        any = true;
        match contents.as_deref().map(core::str::from_utf8) {
            Some(Ok(src)) => {
                let p = parse(src);
                for e in &p.errors {
                    warn(format_args!("{path}: {e} (rule ignored)"));
                }
                set.rules.extend(p.rules);
            }
            Some(Err(_)) => warn(format_args!("{path}: not UTF-8 text (file ignored)")),
            None => warn(format_args!(
                "{path}: cannot be read (EXSOCK_CONFIG ignored)"
            )),
        }
    }
    if any {
        let _ = CONFIG.set(Config {
            set,
            program: program(),
        });
    }
}

/// Every `EXSOCK_*` setting the library reads, for the startup banner (`docs/rules.md`).
pub const SETTINGS: &[&core::ffi::CStr] = &[
    c"EXSOCK_LOG",
    c"EXSOCK_TRACK",
    c"EXSOCK_RULES",
    c"EXSOCK_CONFIG",
    c"EXSOCK_CRC",
    c"EXSOCK_MARKERS",
    c"EXSOCK_MPA_REV",
    c"EXSOCK_MPA_TIMEOUT_MS",
    c"EXSOCK_DUAL",
    c"EXSOCK_DUAL_SOCKOPT",
    c"EXSOCK_DUAL_WAIT_MS",
    c"EXSOCK_DUAL_DEFER_S",
    c"EXSOCK_STATS",
];

static OPTIONS: OnceLock<ddp_user::Options> = OnceLock::new();

/// The options a rule-switched socket starts with: the header's defaults, changed by
/// `EXSOCK_CRC`, `EXSOCK_MARKERS`, `EXSOCK_MPA_REV`, `EXSOCK_MPA_TIMEOUT_MS`.
pub fn options() -> ddp_user::Options {
    OPTIONS.get().cloned().unwrap_or_default()
}

/// An integer setting from the environment, checked against `range`; a bad value is
/// reported and ignored.
pub fn env_int(name: &core::ffi::CStr, range: core::ops::RangeInclusive<u64>) -> Option<u64> {
    let v = crate::config::env(name)?;
    let s = v.to_str().unwrap_or("");
    match s.trim().parse::<u64>() {
        Ok(n) if range.contains(&n) => Some(n),
        _ => {
            crate::log::warn(format_args!(
                "{}={s:?}: expected {}..={} (ignored)",
                name.to_str().unwrap_or("?"),
                range.start(),
                range.end()
            ));
            None
        }
    }
}

/// Reads the rule settings from the environment (from the constructor).
pub fn setup() {
    let mut o = ddp_user::Options::default();
    if let Some(v) = env_int(c"EXSOCK_CRC", 0..=1) {
        o.crc = v == 1;
    }
    if let Some(v) = env_int(c"EXSOCK_MARKERS", 0..=1) {
        o.markers = v == 1;
    }
    if let Some(v) = env_int(c"EXSOCK_MPA_REV", 1..=2) {
        o.mpa_rev = v as u8;
    }
    if let Some(v) = env_int(c"EXSOCK_MPA_TIMEOUT_MS", 1..=3_600_000) {
        o.mpa_timeout = core::time::Duration::from_millis(v);
    }
    let _ = OPTIONS.set(o);
    let inline = crate::config::env(c"EXSOCK_RULES").map(|v| String::from_utf8_lossy(v.to_bytes()));
    let path = crate::config::env(c"EXSOCK_CONFIG").filter(|p| !p.is_empty());
    let file = path.map(|p| {
        (
            p.to_str().unwrap_or("EXSOCK_CONFIG"),
            crate::ddp::read_file(p),
        )
    });
    init(inline.as_deref(), file, crate::log::warn);
}

/// The startup banner (with `EXSOCK_LOG`): version, program, every `EXSOCK_*` setting that is
/// set, and the rules in force.
pub fn banner() {
    if !crate::log::enabled() {
        return;
    }
    let p = active().map(|c| c.program.clone()).unwrap_or_else(program);
    crate::log::debug!(
        "libexsock {} in {} (argv[0] {}): EXSOCK_* settings in force follow",
        env!("CARGO_PKG_VERSION"),
        p.exe,
        p.argv0
    );
    for name in SETTINGS {
        if let Some(v) = crate::config::env(name) {
            crate::log::debug!(
                "  {}={}",
                name.to_str().unwrap_or("?"),
                String::from_utf8_lossy(v.to_bytes())
            );
        }
    }
    match active() {
        Some(c) if !c.set.rules.is_empty() => {
            for (i, r) in c.set.rules.iter().enumerate() {
                crate::log::debug!("  rule {}: {}", i + 1, r.text);
            }
        }
        Some(_) => {
            crate::log::debug!("  rules configured, but none is valid: every socket is plain")
        }
        None => crate::log::debug!("  no rules: sockets switch to DDP mode only by setsockopt"),
    }
}

/// The base names of `/proc/self/exe` and `argv[0]` (raw system calls).
fn program() -> Program {
    let mut buf = [0u8; 4096];
    // SAFETY: our own buffer and its length; raw readlinkat, no hooks.
    let n = unsafe {
        libc::syscall(
            libc::SYS_readlinkat,
            libc::AT_FDCWD,
            c"/proc/self/exe".as_ptr(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
    let exe = if n > 0 {
        basename(&buf[..n as usize])
    } else {
        String::new()
    };
    let argv0 = crate::ddp::read_file(c"/proc/self/cmdline")
        .map(|c| basename(c.split(|&b| b == 0).next().unwrap_or(&[])))
        .unwrap_or_default();
    Program { exe, argv0 }
}

fn basename(path: &[u8]) -> String {
    let base = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    String::from_utf8_lossy(base).into_owned()
}

// ---------------------------------------------------------------- the socket hooks' side

use crate::ddp::entry::{Payload, Pending, Ref};
use crate::errno::{Errno, ErrnoGuard, cvt};
use crate::log::{Addr, debug};
use libc::{c_int, sockaddr, socklen_t};

fn ip_port(a: &Addr) -> Option<(IpAddr, u16)> {
    match a {
        Addr::V4(a) => Some((IpAddr::V4(*a.ip()), a.port())),
        Addr::V6(a) => Some((IpAddr::V6(*a.ip()), a.port())),
        _ => None,
    }
}

/// The local address of `fd` (real getsockname into our own buffer).
fn local_addr(fd: c_int) -> Addr {
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    let mut len = core::mem::size_of_val(&ss) as socklen_t;
    let p = (&mut ss as *mut libc::sockaddr_storage).cast::<sockaddr>();
    // SAFETY: `p`/`len` describe our own buffer.
    if unsafe { crate::real::getsockname(fd, p, &mut len) } != 0 {
        return Addr::None;
    }
    // SAFETY: the kernel wrote at most the buffer's size at `p`.
    unsafe { Addr::read(p, len.min(core::mem::size_of_val(&ss) as socklen_t)) }
}

/// A rule's number and text, for the log.
struct Why<'a>(Option<(usize, &'a Rule)>);

impl fmt::Display for Why<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some((n, r)) => write!(f, "rule {n}: `{}`", r.text),
            None => f.write_str("no rule matched"),
        }
    }
}

/// A new pending DDP entry for a rule-switched socket, attached to `fd`.
fn mark_ddp(fd: c_int, listening: bool, dual: bool) -> Result<(), Errno> {
    let mut p = Pending::new(None);
    p.mode = true;
    p.listening = listening;
    p.dual = dual;
    p.opts = options();
    let r = Ref::new(Payload::Pending(ddp_user::sync::Mutex::new(p))).ok_or(Errno(libc::ENOMEM))?;
    r.attach(fd);
    Ok(())
}

/// After a successful `listen` on `fd`: the server rules decide, on the address it listens
/// on. Sockets the program configured with `SOL_DDP` itself are left alone.
#[cold]
pub fn on_listen(fd: c_int) {
    let Some(cfg) = active() else { return };
    if Ref::of_fd(fd).is_some() {
        return;
    }
    let _errno = ErrnoGuard::new();
    let a = local_addr(fd);
    let Some((ip, port)) = ip_port(&a) else {
        return;
    };
    if crate::ddp::check_tcp(fd).is_err() {
        return;
    }
    let m = cfg.set.find(Role::Server, ip, port, &cfg.program);
    match m {
        Some((_, r)) if r.action == Action::Ddp => {
            let dual = crate::dual::for_rule_listeners();
            if dual {
                crate::dual::prepare_listener(fd);
            }
            match mark_ddp(fd, true, dual) {
                Ok(()) => debug!(
                    "mode: listen({fd}) on {a}: DDP listener{} ({})",
                    if dual { ", dual mode" } else { "" },
                    Why(m)
                ),
                Err(e) => debug!(
                    "mode: listen({fd}) on {a}: plain TCP (errno {}: {})",
                    e.0,
                    Why(m)
                ),
            }
        }
        _ => debug!("mode: listen({fd}) on {a}: plain TCP ({})", Why(m)),
    }
}

/// `connect` on a socket without a DDP entry while rules are configured: the client rules
/// decide, on the destination.
///
/// # Safety
/// As for libc's `connect`.
#[cold]
pub unsafe fn connect(
    cfg: &Config,
    fd: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> Result<c_int, Errno> {
    let a = if addr.is_null() || len < 2 {
        Addr::None
    } else {
        // SAFETY: the caller's address of `len` bytes (as for libc's connect).
        unsafe { Addr::read(addr, len) }
    };
    let m = ip_port(&a).and_then(|(ip, port)| cfg.set.find(Role::Client, ip, port, &cfg.program));
    let ddp = matches!(m, Some((_, r)) if r.action == Action::Ddp);
    if (ddp || crate::log::enabled()) && ip_port(&a).is_some() {
        let tcp = {
            let _errno = ErrnoGuard::new();
            crate::ddp::check_tcp(fd).is_ok()
        };
        if tcp && ddp && mark_ddp(fd, false, false).is_ok() {
            debug!("mode: connect({fd}, {a}): DDP ({})", Why(m));
            if let Some(r) = Ref::of_fd(fd) {
                // SAFETY: the caller's arguments.
                return unsafe { crate::ddp::connect(&r, fd, addr, len) };
            }
        }
        if tcp {
            debug!("mode: connect({fd}, {a}): plain TCP ({})", Why(m));
        }
    }
    // SAFETY: the caller's arguments, passed on unchanged.
    cvt(unsafe { crate::real::connect(fd, addr, len) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prog(exe: &str, argv0: &str) -> Program {
        Program {
            exe: exe.into(),
            argv0: argv0.into(),
        }
    }

    fn set(src: &str) -> RuleSet {
        let p = parse(src);
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        RuleSet { rules: p.rules }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_design_example() {
        let s = set("use ddp tcp_server *:5201; use ddp tcp_client 127.0.0.1:5201");
        let p = prog("iperf3", "iperf3");
        assert_eq!(s.find(Role::Server, ip("0.0.0.0"), 5201, &p).unwrap().0, 1);
        assert_eq!(s.find(Role::Server, ip("::"), 5201, &p).unwrap().0, 1);
        assert!(s.find(Role::Server, ip("0.0.0.0"), 5202, &p).is_none());
        assert_eq!(
            s.find(Role::Client, ip("127.0.0.1"), 5201, &p).unwrap().0,
            2
        );
        assert!(s.find(Role::Client, ip("127.0.0.2"), 5201, &p).is_none());
        assert_eq!(
            s.find(Role::Client, ip("::ffff:127.0.0.1"), 5201, &p)
                .unwrap()
                .0,
            2
        );
        assert_eq!(s.rules[1].text, "use ddp tcp_client 127.0.0.1:5201");
    }

    #[test]
    fn first_match_wins_and_tcp_carves_out() {
        let s =
            set("use tcp tcp_client 10.0.0.9:*\nuse ddp tcp_client 10.0.0.0/8:1000-2000 # lab\n");
        let p = Program::default();
        let (n, r) = s.find(Role::Client, ip("10.0.0.9"), 1500, &p).unwrap();
        assert_eq!((n, r.action), (1, Action::Tcp));
        let (n, r) = s.find(Role::Client, ip("10.1.2.3"), 1000, &p).unwrap();
        assert_eq!((n, r.action), (2, Action::Ddp));
        assert!(s.find(Role::Client, ip("10.1.2.3"), 2001, &p).is_none());
        assert!(s.find(Role::Client, ip("11.0.0.1"), 1500, &p).is_none());
        assert!(s.find(Role::Server, ip("10.1.2.3"), 1500, &p).is_none());
    }

    #[test]
    fn ipv6_and_prefixes() {
        let s = set(
            "use ddp tcp_client [::1]:5201; use ddp tcp_server [fd00::/8]:*;\
             use ddp tcp_server [fe80::]/10:80; use ddp tcp_client 0.0.0.0/0:7",
        );
        let p = Program::default();
        assert_eq!(s.find(Role::Client, ip("::1"), 5201, &p).unwrap().0, 1);
        assert!(s.find(Role::Client, ip("::2"), 5201, &p).is_none());
        assert_eq!(s.find(Role::Server, ip("fd12::1"), 9, &p).unwrap().0, 2);
        assert!(s.find(Role::Server, ip("fe00::1"), 9, &p).is_none());
        assert_eq!(s.find(Role::Server, ip("fe80::1"), 80, &p).unwrap().0, 3);
        assert_eq!(s.find(Role::Client, ip("8.8.8.8"), 7, &p).unwrap().0, 4);
        assert!(s.find(Role::Client, ip("::1"), 7, &p).is_none());
        assert_eq!(s.rules[1].addr, AddrMatch::V6("fd00::".parse().unwrap(), 8));
    }

    #[test]
    fn program_names() {
        let s = set("use ddp tcp_client *:* program python3;use ddp tcp_server * program nginx");
        assert!(
            s.find(
                Role::Client,
                ip("1.2.3.4"),
                1,
                &prog("python3.12", "python3")
            )
            .is_some()
        );
        assert!(
            s.find(Role::Client, ip("1.2.3.4"), 1, &prog("python3", "x"))
                .is_some()
        );
        assert!(
            s.find(Role::Client, ip("1.2.3.4"), 1, &prog("curl", "curl"))
                .is_none()
        );
        assert!(
            s.find(Role::Server, ip("::"), 80, &prog("nginx", "nginx:"))
                .is_some()
        );
    }

    #[test]
    fn errors_have_line_and_column_and_skip_only_their_rule() {
        let p = parse(
            "use ddp tcp_server *:5201\n  use dpp tcp_client *:1; use ddp tcp_client 1.2.3.4:80\n\
             use ddp tcp_client 1.2.3:80\nuse ddp tcp_client 1.2.3.4:99999\n\
             use ddp tcp_client 1.2.3.4/33:1\nuse ddp tcp_client 1.2.3.4:9-8\n\
             use ddp tcp_client [::1:80\nuse ddp tcp_client ::1:80\n\
             use ddp tcp_client *:1 program\nuse ddp tcp_client *:1 prog x\n\
             use ddp tcp_client *:1 program x y\nuse ddp\nfrobnicate\n",
        );
        assert_eq!(p.rules.len(), 2);
        let at: Vec<_> = p.errors.iter().map(|e| (e.line, e.column)).collect();
        assert_eq!(
            at,
            [
                (2, 7),
                (3, 20),
                (4, 28),
                (5, 20),
                (6, 28),
                (7, 20),
                (8, 20),
                (9, 31),
                (10, 24),
                (11, 34),
                (12, 8),
                (13, 1)
            ]
        );
        assert!(p.errors[0].message.contains("`dpp`"), "{}", p.errors[0]);
        assert!(p.errors[2].message.contains("99999"), "{}", p.errors[2]);
        assert_eq!(
            p.errors[0].to_string(),
            "line 2, column 7: expected `ddp` or `tcp`, found `dpp`"
        );
    }

    #[test]
    fn empty_and_comment_only_sources() {
        assert_eq!(parse(""), Parsed::default());
        assert_eq!(parse(" ;; # nothing\n\n# at all;\n"), Parsed::default());
    }

    #[test]
    fn never_panics_on_junk() {
        for s in [
            "[",
            "use ddp tcp_client [",
            "use ddp tcp_client []:",
            "use ddp tcp_client [::1]/",
            "use ddp tcp_client [::1]/x:1",
            "use ddp tcp_client :",
            "use ddp tcp_client *:-",
            "use ddp tcp_client [::1/3]/4:1",
            "use ddp tcp_client é:1",
            "\u{0}\u{1}",
        ] {
            let p = parse(s);
            assert!(p.rules.is_empty() || s.is_empty(), "{s}");
        }
    }
}
