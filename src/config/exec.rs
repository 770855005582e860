//! Running an exec credential plugin (`client.authentication.k8s.io/v1`) and reading the
//! `ExecCredential` it prints.

use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use serde_json::{Map, Value, json};

use super::{Error, ExecConfig, InteractiveMode, Result, Secret};

/// How long a plugin may run before it is killed.
pub(crate) const EXEC_TIMEOUT: Duration = Duration::from_secs(60);

/// How long before its `expirationTimestamp` a plugin's token is replaced.
pub(crate) const REFRESH_MARGIN: Duration = Duration::from_secs(10);

/// How much of a failed plugin's stderr an error keeps.
const STDERR_LIMIT: usize = 4096;

/// The exec API versions this client speaks.
pub(crate) const API_VERSIONS: [&str; 2] = [
    "client.authentication.k8s.io/v1",
    "client.authentication.k8s.io/v1beta1",
];

/// What a plugin run produced.
pub(crate) struct ExecCredential {
    pub(crate) token: Secret,
    pub(crate) expires: Option<SystemTime>,
}

/// Whether a token that expires at `expires` (never, if `None`) is still good to send at `now`.
pub(crate) fn is_fresh(expires: Option<SystemTime>, now: SystemTime) -> bool {
    match expires {
        None => true,
        Some(expires) => now + REFRESH_MARGIN < expires,
    }
}

/// Runs the plugin once and returns the token it prints.
pub(crate) async fn run(config: &ExecConfig) -> Result<ExecCredential> {
    let command = &config.command;
    if config.interactive_mode == InteractiveMode::Always {
        return Err(Error::ExecResponse {
            command: command.clone(),
            problem: "interactiveMode is Always, but this client gives plugins no terminal"
                .to_owned(),
        });
    }
    let mut child = tokio::process::Command::new(command);
    child
        .args(&config.args)
        .envs(config.env.iter().map(|(k, v)| (k, v)))
        .env("KUBERNETES_EXEC_INFO", request(config).to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = child.spawn().map_err(|source| Error::ExecStart {
        command: command.clone(),
        install_hint: config.install_hint.clone(),
        source,
    })?;
    let output = match tokio::time::timeout(EXEC_TIMEOUT, child.wait_with_output()).await {
        Err(_elapsed) => {
            return Err(Error::ExecTimeout {
                command: command.clone(),
                timeout: EXEC_TIMEOUT,
            });
        }
        Ok(output) => output.map_err(|source| Error::ExecStart {
            command: command.clone(),
            install_hint: None,
            source,
        })?,
    };
    if !output.status.success() {
        return Err(Error::ExecFailed {
            command: command.clone(),
            status: output.status,
            stderr: clip(String::from_utf8_lossy(&output.stderr).trim()),
        });
    }
    parse_credential(&output.stdout, &config.api_version).map_err(|problem| Error::ExecResponse {
        command: command.clone(),
        problem,
    })
}

/// At most [`STDERR_LIMIT`] bytes of a plugin's stderr, cut at a character boundary.
fn clip(stderr: &str) -> String {
    if stderr.len() <= STDERR_LIMIT {
        return stderr.to_owned();
    }
    let end = (0..=STDERR_LIMIT)
        .rev()
        .find(|&i| stderr.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}…", &stderr[..end])
}

/// The `ExecCredential` request passed in `KUBERNETES_EXEC_INFO`.
pub(crate) fn request(config: &ExecConfig) -> Value {
    let mut spec = Map::new();
    spec.insert("interactive".into(), Value::Bool(false));
    if let Some(cluster) = config
        .cluster
        .as_deref()
        .filter(|_| config.provide_cluster_info)
    {
        let mut c = Map::new();
        c.insert("server".into(), json!(cluster.server));
        if let Some(name) = &cluster.tls_server_name {
            c.insert("tls-server-name".into(), json!(name));
        }
        if cluster.insecure_skip_tls_verify {
            c.insert("insecure-skip-tls-verify".into(), json!(true));
        }
        if let Some(ca) = &cluster.certificate_authority_data {
            let encoded = base64::engine::general_purpose::STANDARD.encode(ca);
            c.insert("certificate-authority-data".into(), json!(encoded));
        }
        if let Some(proxy) = &cluster.proxy_url {
            c.insert("proxy-url".into(), json!(proxy));
        }
        if cluster.disable_compression {
            c.insert("disable-compression".into(), json!(true));
        }
        if let Some(extension) = &cluster.config {
            c.insert("config".into(), extension.clone());
        }
        spec.insert("cluster".into(), Value::Object(c));
    }
    json!({
        "apiVersion": config.api_version,
        "kind": "ExecCredential",
        "spec": spec,
    })
}

/// Reads a plugin's stdout. The problem text never quotes the token.
pub(crate) fn parse_credential(
    stdout: &[u8],
    api_version: &str,
) -> std::result::Result<ExecCredential, String> {
    let value: Value = match serde_json::from_slice(stdout) {
        Ok(value) => value,
        Err(json_error) => {
            // Some plugins print YAML, which is fine as long as it is a mapping.
            let options = serde_saphyr::options! { with_snippet: false };
            std::str::from_utf8(stdout)
                .ok()
                .and_then(|text| serde_saphyr::from_str_with_options::<Value>(text, options).ok())
                .filter(Value::is_object)
                .ok_or_else(|| format!("output is not an ExecCredential: {json_error}"))?
        }
    };
    let object = value
        .as_object()
        .ok_or("output is not an ExecCredential: not an object")?;
    match object.get("kind").and_then(Value::as_str) {
        Some("ExecCredential") => {}
        Some(kind) => return Err(format!("output has kind {kind:?}, expected ExecCredential")),
        None => return Err("output has no kind, expected ExecCredential".to_owned()),
    }
    match object.get("apiVersion").and_then(Value::as_str) {
        Some(version) if version == api_version => {}
        Some(version) => {
            return Err(format!(
                "output has apiVersion {version:?}, expected {api_version:?}"
            ));
        }
        None => {
            return Err(format!(
                "output has no apiVersion, expected {api_version:?}"
            ));
        }
    }
    let status = object
        .get("status")
        .and_then(Value::as_object)
        .ok_or("output has no status")?;
    let token = match status.get("token") {
        Some(Value::String(token)) if !token.is_empty() => Secret::new(token.clone()),
        Some(Value::String(_)) | Some(Value::Null) | None => {
            return Err(if status.contains_key("clientCertificateData") {
                "output has a client certificate instead of a token; \
                 certificate-issuing plugins are not supported"
                    .to_owned()
            } else {
                "output has no status.token".to_owned()
            });
        }
        Some(_) => return Err("status.token is not a string".to_owned()),
    };
    let expires = match status.get("expirationTimestamp") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(parse_rfc3339(text).ok_or_else(|| {
            format!("status.expirationTimestamp {text:?} is not an RFC 3339 time")
        })?),
        Some(_) => return Err("status.expirationTimestamp is not a string".to_owned()),
    };
    Ok(ExecCredential { token, expires })
}

/// Parses an RFC 3339 time such as `2024-05-01T12:00:00Z` or `2024-05-01T14:00:00.5+02:00`.
/// Times before 1970 come out as the epoch: long expired either way.
pub(crate) fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = b.get(range)?;
        if part.iter().all(u8::is_ascii_digit) {
            std::str::from_utf8(part).ok()?.parse().ok()
        } else {
            None
        }
    };
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (year, month, day) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    let (hour, minute, second) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&month)
        || day < 1
        || day > month_days[month as usize - 1]
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }

    let mut rest = &text[19..];
    let mut nanos = 0u32;
    if let Some(fraction) = rest.strip_prefix('.') {
        let len = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if len == 0 {
            return None;
        }
        let kept = &fraction[..len.min(9)];
        nanos = kept.parse::<u32>().ok()? * 10u32.pow(9 - kept.len() as u32);
        rest = &fraction[len..];
    }
    let offset = match rest.as_bytes() {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let two = |a: &u8, b: &u8| -> Option<i64> {
                (a.is_ascii_digit() && b.is_ascii_digit())
                    .then(|| i64::from((a - b'0') * 10 + (b - b'0')))
            };
            let (h, m) = (two(h1, h2)?, two(m1, m2)?);
            if h > 23 || m > 59 {
                return None;
            }
            let minutes = h * 60 + m;
            if *sign == b'+' { minutes } else { -minutes }
        }
        _ => return None,
    };

    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second
        - offset * 60;
    Some(match u64::try_from(seconds) {
        Ok(seconds) => UNIX_EPOCH + Duration::new(seconds, nanos),
        Err(_) => UNIX_EPOCH,
    })
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ExecCluster;

    const V1: &str = "client.authentication.k8s.io/v1";

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    #[test]
    fn rfc3339_utc_offsets_and_fractions() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(at(0)));
        assert_eq!(
            parse_rfc3339("2024-02-29T12:34:56Z"),
            Some(at(1_709_210_096))
        );
        assert_eq!(
            parse_rfc3339("2024-02-29T14:34:56+02:00"),
            Some(at(1_709_210_096))
        );
        assert_eq!(
            parse_rfc3339("2024-02-29T12:04:56-00:30"),
            Some(at(1_709_210_096))
        );
        assert_eq!(
            parse_rfc3339("2024-02-29T12:34:56.25Z"),
            Some(at(1_709_210_096) + Duration::from_millis(250))
        );
        assert_eq!(parse_rfc3339("1969-12-31T23:59:59Z"), Some(UNIX_EPOCH));
    }

    #[test]
    fn rfc3339_rejects_malformed_times() {
        for bad in [
            "",
            "2024-02-29",
            "2024-02-30T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-01-01T24:00:00Z",
            "2024-01-01T00:00:00",
            "2024-01-01T00:00:00+0100",
            "2024-01-01T00:00:00.Z",
            "2024-01-01T00:00:00Zjunk",
            "2024-0a-01T00:00:00Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn long_stderr_is_clipped_at_a_character_boundary() {
        assert_eq!(clip("short"), "short");
        let long = "é".repeat(STDERR_LIMIT);
        let clipped = clip(&long);
        assert_eq!(clipped.len(), STDERR_LIMIT + "…".len());
        assert!(clipped.ends_with("é…"));
    }

    #[test]
    fn token_is_refreshed_shortly_before_expiry() {
        let expires = at(1_000);
        assert!(is_fresh(None, at(u32::MAX.into())));
        assert!(is_fresh(
            Some(expires),
            at(1_000) - REFRESH_MARGIN - Duration::from_secs(1)
        ));
        assert!(!is_fresh(Some(expires), at(1_000) - REFRESH_MARGIN));
        assert!(!is_fresh(Some(expires), at(2_000)));
    }

    #[test]
    fn credential_with_token_and_expiry_parses() {
        let out = br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",
            "status":{"token":"abc","expirationTimestamp":"1970-01-01T00:16:40Z"}}"#;
        let credential = parse_credential(out, V1).unwrap();
        assert_eq!(credential.token.expose(), "abc");
        assert_eq!(credential.expires, Some(at(1_000)));
    }

    #[test]
    fn credential_in_yaml_parses() {
        let out = b"apiVersion: client.authentication.k8s.io/v1\nkind: ExecCredential\nstatus:\n  token: abc\n";
        assert_eq!(parse_credential(out, V1).unwrap().token.expose(), "abc");
    }

    #[test]
    fn credential_problems_are_named_without_the_token() {
        let cases: [(&[u8], &str); 6] = [
            (
                b"{",
                "output is not an ExecCredential: EOF while parsing an object at line 1 column 1",
            ),
            (
                br#"{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1beta1","status":{"token":"tok"}}"#,
                r#"output has apiVersion "client.authentication.k8s.io/v1beta1", expected "client.authentication.k8s.io/v1""#,
            ),
            (
                br#"{"kind":"Pod","apiVersion":"v1"}"#,
                r#"output has kind "Pod", expected ExecCredential"#,
            ),
            (
                br#"{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","status":{}}"#,
                "output has no status.token",
            ),
            (
                br#"{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","status":{"clientCertificateData":"x","clientKeyData":"y"}}"#,
                "output has a client certificate instead of a token; certificate-issuing plugins are not supported",
            ),
            (
                br#"{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","status":{"token":"tok","expirationTimestamp":"soon"}}"#,
                r#"status.expirationTimestamp "soon" is not an RFC 3339 time"#,
            ),
        ];
        for (out, expected) in cases {
            let problem = parse_credential(out, V1).err().unwrap();
            assert_eq!(problem, expected);
            assert!(!problem.contains("tok\""));
        }
    }

    #[test]
    fn request_carries_cluster_only_when_asked() {
        let mut config = ExecConfig {
            api_version: V1.to_owned(),
            command: "p".into(),
            args: vec![],
            env: vec![],
            install_hint: None,
            provide_cluster_info: false,
            interactive_mode: InteractiveMode::Never,
            cluster: Some(Box::new(ExecCluster {
                server: "https://k:6443".to_owned(),
                tls_server_name: Some("k.local".to_owned()),
                certificate_authority_data: Some(b"PEM".to_vec()),
                config: Some(json!({"audience": "x"})),
                ..ExecCluster::default()
            })),
        };
        assert_eq!(
            request(&config),
            json!({"apiVersion": V1, "kind": "ExecCredential", "spec": {"interactive": false}})
        );
        config.provide_cluster_info = true;
        assert_eq!(
            request(&config)["spec"]["cluster"],
            json!({
                "server": "https://k:6443",
                "tls-server-name": "k.local",
                "certificate-authority-data": "UEVN",
                "config": {"audience": "x"},
            })
        );
    }
}
