//! `allowed_outbound_hosts` checking, following Spin's rules for the parts a
//! database component uses: `scheme://host[:port]`, with `*` for any scheme,
//! host or port, `*.domain` subdomain wildcards, `a..b` port ranges, and the
//! scheme's well-known port when none is written (redis 6379, mysql 3306,
//! ...). Hosts compare as parsed hosts, so `127.0.0.1` never matches
//! `localhost`.

use anyhow::{bail, ensure, Context, Result};
use url::{Host, Url};

/// The parsed `allowed_outbound_hosts` list of one component.
#[derive(Debug, Clone, Default)]
pub struct AllowedHosts(Vec<Pattern>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct Pattern {
    /// `None` is `*://`.
    scheme: Option<String>,
    host: HostPattern,
    port: PortPattern,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    Any,
    /// `*.example.com`, stored as `.example.com`.
    Subdomain(String),
    /// `self`: only relative (same-app) HTTP requests, never a database.
    ToSelf,
    Exact(Host),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PortPattern {
    Any,
    /// Inclusive start, exclusive end, as in Spin's `a..b`.
    Range(u16, u16),
}

impl AllowedHosts {
    /// Parses each (already template-expanded) entry. An empty entry, which a
    /// template over an empty variable can produce, is skipped as Spin does.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self> {
        entries
            .iter()
            .map(AsRef::as_ref)
            .filter(|entry| !entry.trim().is_empty())
            .map(|entry| Pattern::parse(entry).with_context(|| format!("allowed host {entry:?}")))
            .collect::<Result<_>>()
            .map(Self)
    }

    /// Whether the guest may connect to `address`, a URL such as
    /// `mysql://user:pw@127.0.0.1:3306/db`. An address without a scheme gets
    /// `default_scheme`; an unparsable address is simply not allowed.
    pub fn allows(&self, address: &str, default_scheme: &str) -> bool {
        let Some((scheme, host, port)) = parse_address(address, default_scheme) else {
            return false;
        };
        self.0.iter().any(|p| p.matches(&scheme, &host, port))
    }
}

impl Pattern {
    fn parse(entry: &str) -> Result<Self> {
        let entry = entry.trim();
        let Some((scheme, rest)) = entry.split_once("://") else {
            bail!("must have the form <scheme>://<host>[:<port>]");
        };
        let scheme = match scheme {
            "*" => None,
            s if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphabetic()) => Some(s.to_string()),
            s => bail!("invalid scheme {s:?}"),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        ensure!(!rest.contains('/'), "must not include a path");
        // A bracketed IPv6 host contains ':' itself; the port follows "]:".
        let (host, port) = match rest.rfind(':') {
            Some(i) if !rest[i..].contains(']') => (&rest[..i], &rest[i + 1..]),
            _ => (rest, ""),
        };
        let port = match port {
            "" => {
                let default = scheme
                    .as_deref()
                    .and_then(well_known_port)
                    .context("no port given and the scheme has no well-known port")?;
                PortPattern::Range(default, default + 1)
            }
            "*" => PortPattern::Any,
            p => match p.split_once("..") {
                Some((start, end)) => PortPattern::Range(parse_port(start)?, parse_port(end)?),
                None => {
                    let port = parse_port(p)?;
                    PortPattern::Range(port, port.saturating_add(1))
                }
            },
        };
        let host = match host {
            "*" => HostPattern::Any,
            "self" | "self.alt" => HostPattern::ToSelf,
            h => match h.strip_prefix("*.") {
                Some(domain) => {
                    ensure!(
                        !domain.contains('*'),
                        "wildcards are allowed only as prefixes"
                    );
                    match Host::parse(domain)? {
                        Host::Domain(d) => HostPattern::Subdomain(format!(".{d}")),
                        _ => bail!("wildcard suffix must be a domain"),
                    }
                }
                None => {
                    ensure!(!h.contains('*'), "wildcards are allowed only as subdomains");
                    HostPattern::Exact(Host::parse(h)?)
                }
            },
        };
        Ok(Self { scheme, host, port })
    }

    fn matches(&self, scheme: &str, host: &Host, port: u16) -> bool {
        let scheme_ok = self.scheme.as_deref().is_none_or(|s| s == scheme);
        let host_ok = match (&self.host, host) {
            (HostPattern::Any, _) => true,
            (HostPattern::Subdomain(suffix), Host::Domain(d)) => d.ends_with(suffix.as_str()),
            (HostPattern::Subdomain(_), _) | (HostPattern::ToSelf, _) => false,
            (HostPattern::Exact(h), host) => h == host,
        };
        let port_ok = match self.port {
            PortPattern::Any => true,
            PortPattern::Range(start, end) => (start..end).contains(&port),
        };
        scheme_ok && host_ok && port_ok
    }
}

fn parse_port(text: &str) -> Result<u16> {
    text.parse()
        .with_context(|| format!("port {text:?} is not a number"))
}

fn well_known_port(scheme: &str) -> Option<u16> {
    Some(match scheme {
        "postgres" => 5432,
        "mysql" => 3306,
        "redis" => 6379,
        "mqtt" => 1883,
        "http" => 80,
        "https" => 443,
        _ => return None,
    })
}

/// Splits an outbound address into scheme, host and port (explicit or the
/// scheme's well-known one).
fn parse_address(address: &str, default_scheme: &str) -> Option<(String, Host, u16)> {
    // Credentials may contain characters a URL parser rejects; they play no
    // part in the check, so drop them (everything up to the last '@' of the
    // authority).
    let (scheme_prefix, rest) = match address.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (format!("{default_scheme}://"), address),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let without_user = match authority.rfind('@') {
        Some(at) => &rest[at + 1..],
        None => rest,
    };
    let url = Url::parse(&format!("{scheme_prefix}{without_user}")).ok()?;
    let host = Host::parse(url.host_str()?).ok()?;
    let port = url.port().or_else(|| well_known_port(url.scheme()))?;
    Some((url.scheme().to_string(), host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allows(entries: &[&str], address: &str, scheme: &str) -> bool {
        AllowedHosts::parse(entries)
            .unwrap()
            .allows(address, scheme)
    }

    #[test]
    fn seckill_hosts() {
        let hosts = ["redis://127.0.0.1:6379", "mysql://127.0.0.1:3306"];
        assert!(allows(&hosts, "redis://127.0.0.1:6379", "redis"));
        assert!(
            allows(&hosts, "redis://127.0.0.1", "redis"),
            "well-known port"
        );
        assert!(allows(&hosts, "redis://127.0.0.1:6379/0", "redis"));
        assert!(allows(
            &hosts,
            "mysql://seckill:seckill@127.0.0.1:3306/seckill",
            "mysql"
        ));
        assert!(allows(
            &hosts,
            "mysql://u:p%40ss@127.0.0.1/db?ssl-mode=DISABLED",
            "mysql"
        ));

        assert!(
            !allows(&hosts, "redis://127.0.0.1:6380", "redis"),
            "other port"
        );
        assert!(
            !allows(&hosts, "redis://localhost:6379", "redis"),
            "other host"
        );
        assert!(
            !allows(&hosts, "redis://10.0.0.1:6379", "redis"),
            "other host"
        );
        assert!(
            !allows(&hosts, "rediss://127.0.0.1:6379", "redis"),
            "other scheme"
        );
        assert!(
            !allows(&hosts, "mysql://127.0.0.1:6379", "mysql"),
            "scheme/port mix"
        );
        assert!(
            !allows(&hosts, "redis://127.0.0.1:3306", "redis"),
            "scheme/port mix"
        );
        assert!(!allows(&hosts, "not a url at all", "redis"));
        assert!(
            !allows(&[], "redis://127.0.0.1:6379", "redis"),
            "nothing allowed"
        );
    }

    #[test]
    fn address_without_scheme_gets_the_default_one() {
        assert!(allows(
            &["redis://127.0.0.1:6379"],
            "127.0.0.1:6379",
            "redis"
        ));
        assert!(!allows(
            &["redis://127.0.0.1:6379"],
            "127.0.0.1:6379",
            "mysql"
        ));
    }

    #[test]
    fn wildcards_and_ranges() {
        assert!(allows(
            &["*://127.0.0.1:6379"],
            "redis://127.0.0.1:6379",
            "redis"
        ));
        assert!(allows(
            &["redis://*:6379"],
            "redis://db.internal:6379",
            "redis"
        ));
        assert!(allows(
            &["redis://127.0.0.1:*"],
            "redis://127.0.0.1:1",
            "redis"
        ));
        assert!(allows(
            &["redis://*.example.com"],
            "redis://a.example.com",
            "redis"
        ));
        assert!(!allows(
            &["redis://*.example.com"],
            "redis://example.com",
            "redis"
        ));
        assert!(!allows(
            &["redis://*.example.com"],
            "redis://127.0.0.1",
            "redis"
        ));
        assert!(allows(
            &["redis://127.0.0.1:6000..7000"],
            "redis://127.0.0.1:6379",
            "redis"
        ));
        assert!(!allows(
            &["redis://127.0.0.1:6000..7000"],
            "redis://127.0.0.1:7000",
            "redis"
        ));
        assert!(!allows(&["redis://self"], "redis://127.0.0.1", "redis"));
        assert!(allows(
            &["mysql://[::1]:3306"],
            "mysql://[::1]:3306/db",
            "mysql"
        ));
    }

    #[test]
    fn invalid_entries_are_errors() {
        for bad in [
            "127.0.0.1:6379",
            "*",
            "re dis://h",
            "redis://h/path",
            "redis://h:notaport",
            "foo://h",
            "redis://a*.b",
        ] {
            assert!(AllowedHosts::parse(&[bad]).is_err(), "{bad}");
        }
        assert!(AllowedHosts::parse(&[""]).unwrap().0.is_empty());
    }
}
