//! A validating JSON scanner that finds the handful of fields a cache needs without building
//! anything.
//!
//! [`scan_object`] and [`scan_frame`] walk the bytes of a Kubernetes object (or a watch frame
//! holding one) exactly once. They check the whole input is well-formed JSON, by the grammar
//! of RFC 8259, accepting exactly what `serde_json` accepts (paired surrogates only, no more
//! than [`MAX_DEPTH`] levels) except numbers too large for an `f64`, which the grammar allows
//! and a typed decode reports. They record where `metadata.name`,
//! `metadata.namespace`, `metadata.resourceVersion`, `metadata.uid` and `metadata.labels`
//! lie, as `serde_json` reads them: keys with their escapes decoded, a later member replacing
//! an earlier one of the same key, and a `null` key field absent (the fuzz target `json_scan`
//! holds the scanner to this). Nothing is allocated unless one of those strings, or a key,
//! carries an escape.
//!
//! # Implementation Details
//!
//! Most of a Kubernetes object's bytes sit inside strings (annotations, managed fields, data),
//! so the string scan is the hot loop: it tests eight bytes at a time for `"`, `\` and control
//! characters with word-wide bit tricks, and only steps byte by byte around escapes. UTF-8 is
//! checked once for the whole input up front, so the scanner itself only looks at ASCII.
//! Nesting is limited to [`MAX_DEPTH`] levels, as in `serde_json`.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

/// The deepest nesting of arrays and objects accepted; `serde_json` refuses one level more.
pub(crate) const MAX_DEPTH: usize = 127;

/// Whether `byte` may follow a backslash without more checking: every escape but `\u`.
#[inline(always)]
fn simple_escape(byte: u8) -> bool {
    matches!(byte, b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't')
}

/// Why input is not well-formed JSON, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ScanError {
    /// Byte offset of the fault.
    pub offset: usize,
    /// What was wrong there.
    pub reason: &'static str,
}

impl fmt::Display for ScanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.reason, self.offset)
    }
}

impl std::error::Error for ScanError {}

type Scan<T> = Result<T, ScanError>;

/// A JSON string found in the input: where its contents lie (between the quotes), and
/// whether they hold escapes that need decoding.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct StrSpan {
    /// The contents, without the quotes.
    pub range: Range<usize>,
    /// Whether the contents contain a backslash escape.
    pub escaped: bool,
}

impl StrSpan {
    /// The string's value: borrowed when it holds no escapes.
    pub fn value<'a>(&self, input: &'a str) -> Cow<'a, str> {
        let raw = &input[self.range.clone()];
        if self.escaped {
            Cow::Owned(unescape(raw))
        } else {
            Cow::Borrowed(raw)
        }
    }
}

/// Where an object's key fields lie.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ObjectFields {
    /// The whole object, braces included.
    pub object: Range<usize>,
    /// `metadata.name`.
    pub name: Option<StrSpan>,
    /// `metadata.namespace`.
    pub namespace: Option<StrSpan>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<StrSpan>,
    /// `metadata.uid`.
    pub uid: Option<StrSpan>,
    /// `metadata`, braces included, when it is an object.
    pub metadata: Option<Range<usize>>,
    /// `metadata.labels`, braces included, when it is an object.
    pub labels: Option<Range<usize>>,
    /// The `"managedFields": [...]` member of `metadata`, from its key's opening quote to the
    /// end of its value.
    pub managed_fields: Option<Range<usize>>,
}

impl ObjectFields {
    /// Whether a key field (name, namespace, resourceVersion, uid) holds an escape.
    pub fn key_escaped(&self) -> bool {
        [
            &self.name,
            &self.namespace,
            &self.resource_version,
            &self.uid,
        ]
        .iter()
        .any(|f| f.as_ref().is_some_and(|f| f.escaped))
    }
}

/// Where a watch frame's parts lie.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FrameFields {
    /// The event's `type`.
    pub event_type: Option<StrSpan>,
    /// The event's `object`, when it is a JSON object.
    pub object: Option<ObjectFields>,
}

/// Scans one JSON object (a whole input, surrounding whitespace allowed).
pub(crate) fn scan_object(input: &str) -> Scan<ObjectFields> {
    let mut s = Scanner::new(input.as_bytes());
    s.skip_ws();
    let fields = s.object_fields()?;
    s.finish()?;
    Ok(fields)
}

/// Scans one watch frame: `{"type": "...", "object": {...}}`, with its keys in any order.
pub(crate) fn scan_frame(input: &str) -> Scan<FrameFields> {
    let mut s = Scanner::new(input.as_bytes());
    let mut frame = FrameFields::default();
    s.skip_ws();
    s.members(0, |s, key, _| {
        match key {
            b"type" => frame.event_type = Some(s.string_value()?),
            // A later member replaces an earlier one of the same key, as serde_json reads it.
            b"object" if s.peek() == Some(b'{') => frame.object = Some(s.object_fields()?),
            b"object" => {
                frame.object = None;
                s.value(1)?;
            }
            _ => s.value(1)?,
        }
        Ok(())
    })?;
    s.finish()?;
    Ok(frame)
}

/// Checks that `input` is exactly one well-formed JSON value.
pub(crate) fn validate(input: &str) -> Scan<()> {
    let mut s = Scanner::new(input.as_bytes());
    s.skip_ws();
    s.value(0)?;
    s.finish()
}

/// Looks up `key` in a JSON object of strings (a `labels` or `annotations` map) and returns
/// its value. The input must already have been scanned; values that are not strings are
/// skipped.
pub(crate) fn lookup<'a>(map: &'a str, key: &str) -> Option<Cow<'a, str>> {
    let mut found = None;
    let mut s = Scanner::new(map.as_bytes());
    s.skip_ws();
    let _ = s.members(0, |s, k, _| {
        if s.peek() != Some(b'"') {
            if k == key.as_bytes() {
                found = None;
            }
            return s.value(1);
        }
        let value = s.string_value()?;
        if k == key.as_bytes() {
            found = Some(value.value(map));
        }
        Ok(())
    });
    found
}

struct Scanner<'a> {
    bytes: &'a [u8],
    pos: usize,
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// A bit set in the high bit of each byte of `w` that is `"`, `\` or below 0x20. Bits above
/// the lowest set one may be spurious; the lowest is exact.
///
/// Two zero-byte tests rather than three: flipping bit 1 maps `"` (0x22) to 0x20 and permutes
/// the control characters among themselves, so "below 0x21 after the flip" is exactly "a
/// control character or `"`". Each test's lowest set bit is exact (a borrow only runs upward),
/// so their union's is too.
#[inline]
pub(crate) fn special_bytes(w: u64) -> u64 {
    let flipped = w ^ (ONES * 0x02);
    let control_or_quote = flipped.wrapping_sub(ONES * 0x21) & !flipped;
    let backslash = w ^ (ONES * u64::from(b'\\'));
    let zero_backslash = backslash.wrapping_sub(ONES) & !backslash;
    (control_or_quote | zero_backslash) & HIGHS
}

impl<'a> Scanner<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Scanner { bytes, pos: 0 }
    }

    #[cold]
    fn err<T>(&self, reason: &'static str) -> Scan<T> {
        Err(ScanError {
            offset: self.pos,
            reason,
        })
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    #[inline]
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.pos += 1;
        }
    }

    /// Only whitespace may follow the value.
    fn finish(&mut self) -> Scan<()> {
        self.skip_ws();
        if self.pos != self.bytes.len() {
            return self.err("trailing characters after the JSON value");
        }
        Ok(())
    }

    /// Whether the next token starts with `byte`, skipping whitespace before it. Whitespace
    /// is looked for only when the cursor is not on `byte`, so compact JSON, which servers
    /// send, never pays for it.
    #[inline(always)]
    fn at(&mut self, byte: u8) -> bool {
        if self.peek() != Some(byte) {
            self.skip_ws();
            return self.peek() == Some(byte);
        }
        true
    }

    fn expect(&mut self, byte: u8, reason: &'static str) -> Scan<()> {
        if !self.at(byte) {
            return self.err(reason);
        }
        self.pos += 1;
        Ok(())
    }

    /// Skips one value, checking it; `depth` is the nesting of the value's container.
    ///
    /// Iterative rather than recursive: the open containers are bits of a `u128` (set for an
    /// array), which [`MAX_DEPTH`] keeps in range.
    fn value(&mut self, depth: usize) -> Scan<()> {
        let mut arrays: u128 = 0;
        let mut open = 0usize;
        'value: loop {
            match self.peek() {
                Some(b' ' | b'\n' | b'\r' | b'\t') => {
                    self.skip_ws();
                    continue 'value;
                }
                Some(b @ (b'{' | b'[')) => {
                    if depth + open >= MAX_DEPTH {
                        return self.err("nesting too deep");
                    }
                    self.pos += 1;
                    let array = b == b'[';
                    if self.at(if array { b']' } else { b'}' }) {
                        self.pos += 1;
                    } else {
                        arrays = (arrays << 1) | u128::from(array);
                        open += 1;
                        if !array {
                            self.skip_key()?;
                        }
                        continue 'value;
                    }
                }
                Some(b'"') => {
                    self.skip_string()?;
                }
                Some(b't') => self.literal(b"true")?,
                Some(b'f') => self.literal(b"false")?,
                Some(b'n') => self.literal(b"null")?,
                Some(b'-' | b'0'..=b'9') => self.number()?,
                Some(_) => return self.err("expected a JSON value"),
                None => return self.err("unexpected end of input, expected a value"),
            }
            // After a value: close containers until one continues with another member.
            loop {
                if open == 0 {
                    return Ok(());
                }
                let array = arrays & 1 == 1;
                match (self.peek(), array) {
                    (Some(b' ' | b'\n' | b'\r' | b'\t'), _) => self.skip_ws(),
                    (Some(b','), _) => {
                        self.pos += 1;
                        if !array {
                            self.skip_key()?;
                        }
                        continue 'value;
                    }
                    (Some(b']'), true) | (Some(b'}'), false) => {
                        self.pos += 1;
                        arrays >>= 1;
                        open -= 1;
                    }
                    (Some(_), true) => return self.err("expected ',' or ']' in an array"),
                    (Some(_), false) => return self.err("expected ',' or '}' in an object"),
                    (None, true) => return self.err("unexpected end of input in an array"),
                    (None, false) => return self.err("unexpected end of input in an object"),
                }
            }
        }
    }

    /// Skips an object key and its colon, whitespace before either allowed: for
    /// [`value`](Self::value), which does not look at keys ([`members`](Self::members) does).
    #[inline(always)]
    fn skip_key(&mut self) -> Scan<()> {
        if !self.at(b'"') {
            return self.err("expected a string key");
        }
        self.skip_string()?;
        self.expect(b':', "expected ':' after an object key")
    }

    /// Walks an object at the cursor, calling `member` with each key (its escapes decoded,
    /// so `"n\u0061me"` is `name`, as serde_json reads it) and the offset of the key's
    /// opening quote, the cursor placed right after the key's colon; `member` must consume
    /// the value.
    fn members(
        &mut self,
        depth: usize,
        mut member: impl FnMut(&mut Self, &[u8], usize) -> Scan<()>,
    ) -> Scan<()> {
        if depth >= MAX_DEPTH {
            return self.err("nesting too deep");
        }
        self.expect(b'{', "expected '{'")?;
        if self.at(b'}') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            if !self.at(b'"') {
                return self.err("expected a string key");
            }
            let start = self.pos;
            let key = self.string()?;
            self.expect(b':', "expected ':' after an object key")?;
            // `member` looks at the value's first byte.
            self.skip_ws();
            if key.escaped {
                // Rare: no server escapes a key. The scanner checked the escapes, and the
                // input is a `str`, so the key is UTF-8.
                let raw = std::str::from_utf8(&self.bytes[key.range]).unwrap_or_default();
                member(self, unescape(raw).as_bytes(), start)?;
            } else {
                let bytes = self.bytes;
                member(self, &bytes[key.range], start)?;
            }
            if self.at(b',') {
                self.pos += 1;
                continue;
            }
            match self.peek() {
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some(_) => return self.err("expected ',' or '}' in an object"),
                None => return self.err("unexpected end of input in an object"),
            }
        }
    }

    /// A string value at the cursor, `None` for `null` (which a typed decode reads as an
    /// absent field), or an error naming what was there instead.
    fn optional_string(&mut self) -> Scan<Option<StrSpan>> {
        if self.peek() == Some(b'n') {
            self.literal(b"null")?;
            return Ok(None);
        }
        self.string_value().map(Some)
    }

    /// A string value at the cursor, or an error naming what was there instead.
    fn string_value(&mut self) -> Scan<StrSpan> {
        if self.peek() != Some(b'"') {
            // Report the value's own fault if it is not even JSON.
            self.value(1)?;
            return self.err("expected a string");
        }
        self.string()
    }

    /// Skips a string at the cursor (on its opening quote) and returns its contents' span.
    #[inline]
    fn string(&mut self) -> Scan<StrSpan> {
        let start = self.pos + 1;
        let escaped = self.skip_string()?;
        Ok(StrSpan {
            range: start..self.pos - 1,
            escaped,
        })
    }

    /// Moves the cursor past the string it is on (on its opening quote), checking it; returns
    /// whether the string holds escapes.
    ///
    /// Inlined into every caller, so skipping a string costs no call: most of an object's
    /// tokens are short strings. Only the rare cases (a `\u` escape, the last few bytes of
    /// the input, faults) leave this loop.
    #[inline(always)]
    fn skip_string(&mut self) -> Scan<bool> {
        let bytes = self.bytes;
        let mut pos = self.pos + 1;
        let mut escaped = false;
        loop {
            // Eight bytes at a time while no special byte appears.
            while let Some(chunk) = bytes.get(pos..pos + 8) {
                let word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
                let special = special_bytes(word);
                if special != 0 {
                    pos += (special.trailing_zeros() / 8) as usize;
                    break;
                }
                pos += 8;
            }
            match bytes.get(pos) {
                Some(b'"') => {
                    self.pos = pos + 1;
                    return Ok(escaped);
                }
                // The common escapes stay in the loop.
                Some(b'\\') if bytes.get(pos + 1).is_some_and(|&b| simple_escape(b)) => {
                    escaped = true;
                    pos += 2;
                }
                _ => {
                    self.pos = pos;
                    escaped |= self.string_step()?;
                    pos = self.pos;
                }
            }
        }
    }

    /// One step of [`skip_string`](Self::skip_string) off its fast path, the cursor on a byte
    /// that is not a closing quote: a `\u` or faulty escape, a control character, an ordinary
    /// byte among the input's last seven, or the end of the input. Returns whether it stepped
    /// over an escape.
    #[inline(never)]
    fn string_step(&mut self) -> Scan<bool> {
        match self.peek() {
            Some(b'\\') => self.escape().map(|()| true),
            Some(0..0x20) => self.err("control character in a string"),
            Some(_) => {
                self.pos += 1;
                Ok(false)
            }
            None => self.err("unexpected end of input in a string"),
        }
    }

    /// Checks one escape at the cursor (on its backslash).
    fn escape(&mut self) -> Scan<()> {
        self.pos += 1;
        match self.peek() {
            Some(b) if simple_escape(b) => {
                self.pos += 1;
                Ok(())
            }
            Some(b'u') => {
                self.pos += 1;
                let unit = self.hex4()?;
                match unit {
                    0xD800..=0xDBFF => {
                        if self.bytes.get(self.pos..self.pos + 2) != Some(b"\\u") {
                            return self.err("unpaired surrogate in a \\u escape");
                        }
                        self.pos += 2;
                        if !(0xDC00..=0xDFFF).contains(&self.hex4()?) {
                            return self.err("unpaired surrogate in a \\u escape");
                        }
                        Ok(())
                    }
                    0xDC00..=0xDFFF => self.err("unpaired surrogate in a \\u escape"),
                    _ => Ok(()),
                }
            }
            Some(_) => self.err("invalid escape in a string"),
            None => self.err("unexpected end of input in a string"),
        }
    }

    fn hex4(&mut self) -> Scan<u32> {
        let Some(digits) = self.bytes.get(self.pos..self.pos + 4) else {
            return self.err("unexpected end of input in a \\u escape");
        };
        let mut unit = 0;
        for &d in digits {
            let Some(v) = (d as char).to_digit(16) else {
                return self.err("invalid hex digit in a \\u escape");
            };
            unit = unit * 16 + v;
        }
        self.pos += 4;
        Ok(unit)
    }

    fn literal(&mut self, word: &'static [u8]) -> Scan<()> {
        if self.bytes.get(self.pos..self.pos + word.len()) != Some(word) {
            return self.err("invalid literal");
        }
        self.pos += word.len();
        Ok(())
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        self.pos - start
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    fn number(&mut self) -> Scan<()> {
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return self.err("invalid number"),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return self.err("invalid number: no digits after '.'");
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return self.err("invalid number: no digits in the exponent");
            }
        }
        Ok(())
    }

    /// Scans an object at the cursor, picking out its metadata's key fields.
    ///
    /// The fields are those `serde_json` (and so a typed decode) reads: a key field that is
    /// `null` is absent, and a later member replaces an earlier one of the same key, so a
    /// second `metadata` (or `labels`) drops what the first one held.
    fn object_fields(&mut self) -> Scan<ObjectFields> {
        let start = self.pos;
        let mut fields = ObjectFields::default();
        self.members(1, |s, key, _| {
            if key != b"metadata" {
                return s.value(2);
            }
            fields = ObjectFields::default();
            if s.peek() != Some(b'{') {
                return s.value(2);
            }
            let metadata = s.pos;
            s.members(2, |s, key, key_start| {
                match key {
                    b"name" => fields.name = s.optional_string()?,
                    b"namespace" => fields.namespace = s.optional_string()?,
                    b"resourceVersion" => fields.resource_version = s.optional_string()?,
                    b"uid" => fields.uid = s.optional_string()?,
                    b"managedFields" => {
                        s.value(3)?;
                        fields.managed_fields = Some(key_start..s.pos);
                    }
                    b"labels" => {
                        let labels = s.pos;
                        let object = s.peek() == Some(b'{');
                        s.value(3)?;
                        fields.labels = object.then_some(labels..s.pos);
                    }
                    _ => s.value(3)?,
                }
                Ok(())
            })?;
            fields.metadata = Some(metadata..s.pos);
            Ok(())
        })?;
        fields.object = start..self.pos;
        Ok(fields)
    }
}

/// Decodes the escapes of a JSON string's contents that the scanner has already checked.
fn unescape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let decoded = match chars.next() {
            Some('b') => '\u{8}',
            Some('f') => '\u{c}',
            Some('n') => '\n',
            Some('r') => '\r',
            Some('t') => '\t',
            Some('u') => {
                let hex = |chars: &mut std::str::Chars<'_>| {
                    let digits: String = chars.by_ref().take(4).collect();
                    u32::from_str_radix(&digits, 16).unwrap_or(0xFFFD)
                };
                let unit = hex(&mut chars);
                let code = if (0xD800..0xDC00).contains(&unit) {
                    chars.nth(1); // the scanner guaranteed "\u" follows
                    let low = hex(&mut chars);
                    0x10000 + ((unit - 0xD800) << 10) + (low.wrapping_sub(0xDC00) & 0x3FF)
                } else {
                    unit
                };
                char::from_u32(code).unwrap_or('\u{FFFD}')
            }
            Some(other) => other, // '"', '\\' and '/'
            None => break,
        };
        out.push(decoded);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Our verdict on `input` is serde_json's. Where serde_json stops at a number too large
    /// for an `f64` it gives no verdict on the grammar, so neither do we here (see
    /// `numbers_too_large_for_f64_are_well_formed`).
    fn agree(input: &str) {
        let ours = validate(input);
        let theirs = serde_json::from_str::<serde_json::Value>(input);
        if theirs
            .as_ref()
            .is_err_and(|e| e.to_string().starts_with("number out of range"))
        {
            return;
        }
        assert_eq!(
            ours.is_ok(),
            theirs.is_ok(),
            "{input:?}: ours {ours:?}, serde_json {theirs:?}"
        );
    }

    #[test]
    fn numbers_too_large_for_f64_are_well_formed() {
        assert!(validate("[1e400, -1e400]").is_ok());
        assert!(validate("[1e400, -1e]").is_err());
    }

    #[test]
    fn accepts_and_rejects_what_serde_json_does() {
        for input in [
            "{}",
            "[]",
            " {\"a\" : [1, -2.5e3, 0, true, false, null, \"x\"]} ",
            "\"\\u00e9\\ud83d\\ude00\\n\\/\"",
            "\"é日本\"",
            "{\"a\":}",
            "{\"a\" 1}",
            "{a:1}",
            "[1,]",
            "[1 2]",
            "01",
            "1.",
            "-",
            "1e",
            "+1",
            "tru",
            "nul",
            "\"\\x\"",
            "\"\\u12\"",
            "\"\\ud800\"",
            "\"\\udc00\"",
            "\"a\u{1}b\"",
            "{} {}",
            "",
            "   ",
            "\"unterminated",
            "{\"a\":1",
        ] {
            agree(input);
        }
    }

    #[test]
    fn nesting_stops_at_the_limit() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(validate(&deep(MAX_DEPTH)).is_ok());
        assert_eq!(
            validate(&deep(MAX_DEPTH + 1)).unwrap_err().reason,
            "nesting too deep"
        );
        agree(&deep(MAX_DEPTH));
        agree(&deep(MAX_DEPTH + 1));
    }

    #[test]
    fn errors_point_at_the_fault() {
        assert_eq!(
            validate("{\"a\":1,}").unwrap_err(),
            ScanError {
                offset: 7,
                reason: "expected a string key"
            }
        );
        assert_eq!(
            validate("[\"ab\\q\"]").unwrap_err(),
            ScanError {
                offset: 5,
                reason: "invalid escape in a string"
            }
        );
    }

    #[test]
    fn a_frame_gives_its_type_object_and_key_fields() {
        let frame = r#"{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{"name":"web","namespace":"n\u0073","resourceVersion":"42","uid":"u-1","labels":{"app":"x","tier":"a\/b"}},"data":{"k":"v"}}}"#;
        let f = scan_frame(frame).unwrap();
        assert_eq!(f.event_type.unwrap().value(frame), "ADDED");
        let o = f.object.unwrap();
        assert!(frame[o.object.clone()].starts_with("{\"kind\""));
        assert!(frame[o.object.clone()].ends_with("}}"));
        assert_eq!(o.name.unwrap().value(frame), "web");
        let ns = o.namespace.unwrap();
        assert!(ns.escaped);
        assert_eq!(ns.value(frame), "ns");
        assert_eq!(o.resource_version.unwrap().value(frame), "42");
        assert_eq!(o.uid.unwrap().value(frame), "u-1");
        let labels = &frame[o.labels.unwrap()];
        assert_eq!(lookup(labels, "app").as_deref(), Some("x"));
        assert_eq!(lookup(labels, "tier").as_deref(), Some("a/b"));
        assert_eq!(lookup(labels, "missing"), None);
    }

    #[test]
    fn key_order_does_not_matter_and_nested_metadata_is_not_confused() {
        let frame = r#"{"object":{"spec":{"metadata":{"name":"inner"}},"metadata":{"name":"outer"}},"type":"MODIFIED"}"#;
        let f = scan_frame(frame).unwrap();
        assert_eq!(f.event_type.unwrap().value(frame), "MODIFIED");
        assert_eq!(f.object.unwrap().name.unwrap().value(frame), "outer");
    }

    #[test]
    fn a_name_that_is_not_a_string_is_an_error() {
        let err = scan_object(r#"{"metadata":{"name":5}}"#).unwrap_err();
        assert_eq!(err.reason, "expected a string");
        let err = scan_object(r#"{"metadata":{"name":[}}"#).unwrap_err();
        assert_eq!(err.reason, "expected a JSON value");
    }

    #[test]
    fn escaped_keys_are_read_as_their_decoded_text() {
        let input = r#"{"metad\u0061ta":{"n\u0061me":"web","labels":{"\u0061pp":"x"}}}"#;
        let o = scan_object(input).unwrap();
        assert_eq!(o.name.unwrap().value(input), "web");
        assert_eq!(
            lookup(&input[o.labels.unwrap()], "app").as_deref(),
            Some("x")
        );
        let frame = r#"{"typ\u0065":"ADDED","\u006fbject":{"metadata":{"uid":"u"}}}"#;
        let f = scan_frame(frame).unwrap();
        assert_eq!(f.event_type.unwrap().value(frame), "ADDED");
        assert_eq!(f.object.unwrap().uid.unwrap().value(frame), "u");
    }

    #[test]
    fn a_later_member_replaces_an_earlier_one_as_in_serde_json() {
        let input = r#"{"metadata":{"name":"a","labels":{"k":"v"}},"metadata":{"uid":"u"}}"#;
        let o = scan_object(input).unwrap();
        assert_eq!((o.name, o.labels), (None, None));
        assert_eq!(o.uid.unwrap().value(input), "u");
        let o = scan_object(r#"{"metadata":{"name":"a"},"metadata":5}"#).unwrap();
        assert_eq!((o.name, o.metadata), (None, None));
        let o = scan_object(r#"{"metadata":{"labels":{"k":"v"},"labels":null}}"#).unwrap();
        assert_eq!(o.labels, None);
        let f = scan_frame(r#"{"type":"ADDED","object":{"metadata":{}},"object":5}"#).unwrap();
        assert_eq!(f.object, None);
        assert_eq!(lookup(r#"{"k":"v","k":5}"#, "k"), None);
        assert_eq!(lookup(r#"{"k":"v","k":"w"}"#, "k").as_deref(), Some("w"));
    }

    #[test]
    fn a_null_key_field_is_absent() {
        let input =
            r#"{"metadata":{"name":null,"namespace":null,"uid":"u","resourceVersion":null}}"#;
        let o = scan_object(input).unwrap();
        assert_eq!(
            (o.name, o.namespace, o.resource_version),
            (None, None, None)
        );
        assert_eq!(o.uid.unwrap().value(input), "u");
        assert_eq!(
            scan_object(r#"{"metadata":{"name":nul}}"#)
                .unwrap_err()
                .reason,
            "invalid literal"
        );
    }

    /// Whether the string scan must stop at `b`.
    fn is_special(b: u8) -> bool {
        b == b'"' || b == b'\\' || b < 0x20
    }

    #[test]
    fn special_bytes_finds_every_special_byte_at_every_position() {
        for b in 0..=255u8 {
            for at in 0..8 {
                let mut word = [b'a'; 8];
                word[at] = b;
                let special = special_bytes(u64::from_le_bytes(word));
                if is_special(b) {
                    assert_eq!(special.trailing_zeros() / 8, at as u32, "{b:#04x} at {at}");
                } else {
                    assert_eq!(special, 0, "{b:#04x} at {at}");
                }
            }
        }
    }

    #[test]
    fn unescape_decodes_every_escape() {
        assert_eq!(
            unescape(r#"\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00x"#),
            "\"\\/\u{8}\u{c}\n\r\té😀x"
        );
    }

    /// JSON-ish text: mostly valid documents, with random damage.
    fn jsonish() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("null".to_owned()),
            Just("true".to_owned()),
            any::<i32>().prop_map(|n| n.to_string()),
            any::<f32>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| format!("{f:e}")),
            "[ -~é\\\\\"\u{1}\n]{0,40}".prop_map(|s| serde_json::to_string(&s).unwrap()),
            "[\\\\\"a-z0-9u]{0,40}".prop_map(|s| format!("\"{s}\"")),
        ];
        let doc = leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec(("[a-z]{0,4}", inner), 0..5).prop_map(|v| {
                    let members: Vec<String> = v
                        .into_iter()
                        .map(|(k, v)| format!("\"{k}\" : {v}"))
                        .collect();
                    format!("{{{}}}", members.join(","))
                }),
            ]
        });
        (
            doc,
            any::<prop::sample::Index>(),
            0..4usize,
            "[ -/:-~]{0,2}",
        )
            .prop_map(|(doc, at, damage, junk)| {
                let mut bytes: Vec<char> = doc.chars().collect();
                let i = at.index(bytes.len().max(1)).min(bytes.len());
                match damage {
                    0 => {}
                    1 => {
                        if i < bytes.len() {
                            bytes.remove(i);
                        }
                    }
                    2 => bytes.splice(i..i, junk.chars()).for_each(drop),
                    _ => bytes.truncate(i),
                }
                bytes.into_iter().collect()
            })
    }

    /// Recorded watch frames, each damaged in one to three places with the bytes strings and
    /// escapes are made of, are judged as `serde_json` judges them: real objects, whose long
    /// with long escaped strings.
    #[test]
    fn damaged_recorded_frames_are_judged_as_serde_json_judges_them() {
        let recorded = include_str!("../../../testdata/watch/configmaps-1200.jsonl");
        let frames: Vec<&[u8]> = recorded.lines().map(str::as_bytes).collect();
        // xorshift64: the same damage on every run.
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = |below: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % below as u64) as usize
        };
        let bytes = b"\\\"\\\"u0aA\n\x01/bnrtf{}[]:, ";
        let mut judged = [0usize; 2];
        for _ in 0..5_000 {
            let mut frame = frames[next(frames.len())].to_vec();
            for _ in 0..1 + next(3) {
                let (at, byte) = (next(frame.len()), bytes[next(bytes.len())]);
                match next(3) {
                    0 => frame[at] = byte,
                    1 => frame.insert(at, byte),
                    _ => drop(frame.remove(at)),
                }
            }
            let frame = std::str::from_utf8(&frame).expect("the recording is ASCII");
            agree(frame);
            let valid = validate(frame).is_ok();
            assert_eq!(scan_frame(frame).is_ok(), valid, "{frame}");
            judged[usize::from(valid)] += 1;
        }
        // Both verdicts came up often.
        assert!(judged.iter().all(|&n| n > 500), "{judged:?}");
    }

    /// A frame's name, namespace, resourceVersion, uid and `app` label.
    fn key_fields(frame: &str) -> Vec<Option<String>> {
        let object = scan_frame(frame).unwrap().object.unwrap();
        let labels = &frame[object.labels.clone().unwrap()];
        [
            &object.name,
            &object.namespace,
            &object.resource_version,
            &object.uid,
        ]
        .into_iter()
        .map(|f| f.as_ref().map(|s| s.value(frame).into_owned()))
        .chain([lookup(labels, "app").map(Cow::into_owned)])
        .collect()
    }

    /// Whitespace may stand before and after every token: recorded frames with each of the
    /// four whitespace bytes around every `{}[]:,` give the fields the compact frames give,
    /// and damaged, are judged as `serde_json` judges them.
    #[test]
    fn whitespace_around_every_token_changes_nothing() {
        let recorded = include_str!("../../../testdata/watch/configmaps-1200.jsonl");
        for (n, compact) in recorded.lines().take(200).enumerate() {
            let mut spaced = String::new();
            let (mut in_string, mut escaped) = (false, false);
            for (i, c) in compact.chars().enumerate() {
                let ws = [" ", "\n", "\t", "\r\n "][(n + i) % 4];
                let structural = !in_string && "{}[]:,".contains(c);
                if structural {
                    spaced.push_str(ws);
                }
                spaced.push(c);
                if structural {
                    spaced.push_str(ws);
                }
                (in_string, escaped) = match (in_string, escaped, c) {
                    (true, false, '\\') => (true, true),
                    (true, false, '"') | (false, _, '"') => (!in_string, false),
                    _ => (in_string, false),
                };
            }
            let (a, b) = (key_fields(compact), key_fields(&spaced));
            assert_eq!(a, b);
            assert!(b.iter().all(Option::is_some), "{b:?}");
            agree(&spaced);
            agree(&spaced[..spaced.len() * n / 200]);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        #[test]
        fn validity_matches_serde_json(input in jsonish()) {
            agree(&input);
        }

        #[test]
        fn special_bytes_stops_at_the_first_special_byte(word in any::<[u8; 8]>()) {
            let first = word.iter().position(|&b| is_special(b));
            let special = special_bytes(u64::from_le_bytes(word));
            match first {
                Some(at) => prop_assert_eq!(special.trailing_zeros() / 8, at as u32),
                None => prop_assert_eq!(special, 0),
            }
        }

        #[test]
        fn strings_decode_as_serde_json_does(s in "\\PC{0,64}", tail in 0..20usize) {
            let json = serde_json::to_string(&s).unwrap();
            let end = json.len();
            // Followed by more or less input, so both the block and the word paths run.
            let input = format!("{json}{:tail$}", "");
            let span = Scanner::new(input.as_bytes()).string().unwrap();
            prop_assert_eq!(span.range.end, end - 1);
            prop_assert_eq!(span.escaped, json[1..end - 1].contains('\\'));
            prop_assert_eq!(span.value(&input), s);
        }

        #[test]
        fn raw_strings_are_judged_as_serde_json_judges_them(
            body in "[\\\\\"a-z0-9u\n\u{1}é]{0,48}",
            tail in 0..20usize,
        ) {
            // Dense in backslashes, quotes and `u`: every escape and fault, across blocks.
            agree(&format!("[\"{body}\"{:tail$}]", ""));
        }
    }
}
