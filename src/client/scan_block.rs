//! Sixteen bytes of a JSON string classified at once: the string scanner's hot loop.
//!
//! [`Block::classify`] turns sixteen input bytes into three bit masks (bit `i` for byte `i`):
//! quotes, backslashes and control characters. On x86-64 this is a handful of SSE2
//! instructions (SSE2 is part of every x86-64 CPU, so nothing is detected at run time);
//! elsewhere a plain loop computes the same masks.
//!
//! [`escaped_bytes`] then says which bytes of the block a backslash escapes, carrying an
//! escape that starts on the block's last byte into the next block, so a string full of
//! `\"` (as in `kubectl.kubernetes.io/last-applied-configuration`) is still read a block at a
//! time rather than a byte at a time.

/// Bytes per block.
pub(crate) const LEN: usize = 16;

/// The classified bytes of one block; bit `i` of each mask is byte `i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Block {
    /// `"` bytes.
    pub quotes: u32,
    /// `\` bytes.
    pub backslashes: u32,
    /// Bytes below 0x20, which a JSON string may not hold unescaped.
    pub controls: u32,
}

impl Block {
    /// Classifies `bytes`.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    #[allow(unsafe_code)]
    pub fn classify(bytes: &[u8; LEN]) -> Block {
        use std::arch::x86_64::{
            _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8, _mm_set1_epi8,
        };
        // SAFETY: SSE2 is part of the x86-64 baseline, so these instructions exist on every
        // CPU this code runs on; the load reads exactly the sixteen bytes `bytes` borrows, and
        // `_mm_loadu_si128` accepts any alignment. Nothing else here touches memory.
        unsafe {
            let v = _mm_loadu_si128(bytes.as_ptr().cast());
            let mask = |m| _mm_movemask_epi8(m) as u32 & 0xFFFF;
            Block {
                quotes: mask(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8))),
                backslashes: mask(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8))),
                // `min(v, 0x1F) == v` exactly when `v <= 0x1F`, comparing unsigned.
                controls: mask(_mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1F)), v)),
            }
        }
    }

    /// Classifies `bytes`.
    #[cfg(not(target_arch = "x86_64"))]
    #[inline(always)]
    pub fn classify(bytes: &[u8; LEN]) -> Block {
        Self::classify_portably(bytes)
    }

    /// Classifies `bytes` without SIMD: what other CPUs run, and what the tests hold the SSE2
    /// version to.
    #[cfg(any(test, not(target_arch = "x86_64")))]
    #[inline(always)]
    fn classify_portably(bytes: &[u8; LEN]) -> Block {
        let mut block = Block {
            quotes: 0,
            backslashes: 0,
            controls: 0,
        };
        for (i, &b) in bytes.iter().enumerate() {
            block.quotes |= u32::from(b == b'"') << i;
            block.backslashes |= u32::from(b == b'\\') << i;
            block.controls |= u32::from(b < 0x20) << i;
        }
        block
    }
}

/// The bytes a backslash escapes, given a block's `backslashes` and `carry` (1 when the
/// previous block ended with a backslash that escapes this block's first byte). Bit `i` is
/// set when byte `i` follows an escaping backslash; bit [`LEN`] is the carry into the next
/// block.
///
/// A backslash escapes the byte after it unless it is itself escaped, so the escaping ones
/// are found lowest first; a block holds few, so the loop is short.
#[inline(always)]
pub(crate) fn escaped_bytes(backslashes: u32, carry: u32) -> u32 {
    let mut escaped = carry;
    let mut pending = backslashes & !carry;
    while pending != 0 {
        let escaper = pending & pending.wrapping_neg();
        escaped |= escaper << 1;
        pending &= !(escaper | escaper << 1);
    }
    escaped
}

/// Whether `byte` may follow a backslash without more checking: every escape but `\u`.
#[inline(always)]
pub(crate) fn simple_escape(byte: u8) -> bool {
    matches!(byte, b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The escaped bytes, walking the block as a parser does.
    fn escaped_slowly(bytes: &[u8; LEN], carry: bool) -> u32 {
        let mut escaped = 0;
        let mut i = 0;
        if carry {
            escaped |= 1;
            i = 1;
        }
        while i < LEN {
            if bytes[i] == b'\\' {
                escaped |= 1 << (i + 1);
                i += 2;
            } else {
                i += 1;
            }
        }
        escaped
    }

    #[test]
    fn runs_of_backslashes_escape_alternately() {
        let block = *br#"\\\"a\\"\\\\\x"b"#;
        let escaped = escaped_bytes(Block::classify(&block).backslashes, 0);
        assert_eq!(escaped, escaped_slowly(&block, false));
        // `\\` `\"` a `\\` " `\\` `\\` `\x` " b: the escaped bytes are 1, 3, 6, 9, 11 and 13.
        assert_eq!(
            escaped,
            1 << 1 | 1 << 3 | 1 << 6 | 1 << 9 | 1 << 11 | 1 << 13
        );
        // A trailing escaping backslash carries into the next block.
        let tail = *b"abcdefghijklmno\\";
        assert_eq!(
            escaped_bytes(Block::classify(&tail).backslashes, 0),
            1 << LEN
        );
        // A carried escape consumes the next block's first backslash.
        let head = *b"\\\\abcdefghijklmn";
        assert_eq!(escaped_bytes(Block::classify(&head).backslashes, 1), 0b101);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        #[test]
        fn classify_matches_the_bytes(bytes in any::<[u8; LEN]>()) {
            let block = Block::classify(&bytes);
            prop_assert_eq!(block, Block::classify_portably(&bytes));
            for (i, &b) in bytes.iter().enumerate() {
                prop_assert_eq!(block.quotes >> i & 1 == 1, b == b'"');
                prop_assert_eq!(block.backslashes >> i & 1 == 1, b == b'\\');
                prop_assert_eq!(block.controls >> i & 1 == 1, b < 0x20);
            }
        }

        #[test]
        fn escapes_match_a_byte_walk(
            picks in proptest::collection::vec(0usize..4, LEN),
            carry: bool,
        ) {
            // Mostly backslashes and quotes, where the cases are.
            let alphabet = [b'\\', b'\\', b'"', b'a'];
            let bytes: [u8; LEN] = std::array::from_fn(|i| alphabet[picks[i]]);
            let backslashes = Block::classify(&bytes).backslashes;
            prop_assert_eq!(
                escaped_bytes(backslashes, u32::from(carry)),
                escaped_slowly(&bytes, carry)
            );
        }
    }
}
