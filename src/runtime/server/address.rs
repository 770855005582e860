//! kubebuilder's bind-address flags (`--metrics-bind-address`, `--health-probe-bind-address`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use super::Error;

/// Reads a kubebuilder-style bind address flag: `""` or `"0"` disable the server (`None`);
/// `":8081"` listens on every IPv4 address; `"127.0.0.1:8080"`, `"[::1]:8080"` and
/// `"localhost:8080"` on that address.
///
/// # Errors
///
/// [`Error::InvalidBindAddress`] for anything else: a missing or bad port, or a host name
/// other than `localhost` (names are not resolved).
pub fn parse_bind_address(s: &str) -> Result<Option<SocketAddr>, Error> {
    let s = s.trim();
    if s.is_empty() || s == "0" {
        return Ok(None);
    }
    let bad = |reason: &str| Error::InvalidBindAddress {
        address: s.to_owned(),
        reason: reason.to_owned(),
    };
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(Some(addr));
    }
    let (host, port) = s.rsplit_once(':').ok_or_else(|| bad("missing port"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| bad("the port must be a number from 0 to 65535"))?;
    let ip = match host {
        "" => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        "localhost" => IpAddr::V4(Ipv4Addr::LOCALHOST),
        h => h
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| bad("the host must be an IP address, localhost or empty"))?,
    };
    Ok(Some(SocketAddr::new(ip, port)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_addresses_follow_kubebuilder_flags() {
        assert_eq!(parse_bind_address("0").unwrap(), None);
        assert_eq!(parse_bind_address("").unwrap(), None);
        assert_eq!(
            parse_bind_address(":8081").unwrap(),
            Some("0.0.0.0:8081".parse().unwrap())
        );
        assert_eq!(
            parse_bind_address("127.0.0.1:8080").unwrap(),
            Some("127.0.0.1:8080".parse().unwrap())
        );
        assert_eq!(
            parse_bind_address("[::1]:8443").unwrap(),
            Some("[::1]:8443".parse().unwrap())
        );
        assert_eq!(
            parse_bind_address("localhost:9090").unwrap(),
            Some("127.0.0.1:9090".parse().unwrap())
        );
        for bad in ["8080", ":http", ":70000", "example.com:80", "1.2.3:80"] {
            assert!(
                matches!(
                    parse_bind_address(bad),
                    Err(Error::InvalidBindAddress { .. })
                ),
                "{bad}"
            );
        }
    }
}
