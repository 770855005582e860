//! The hash space: 64-bit FNV-1a of a shard key, half-open [`HashRange`]s over it, sets of
//! them ([`Ranges`]), the `shardSelector` they become on the wire, and the deterministic
//! split of the space among live members ([`assign`]).

use std::fmt;
use std::str::FromStr;

/// 2^64: the exclusive end of the whole hash space.
const SPACE: u128 = 1 << 64;

/// 64-bit FNV-1a of `value`'s UTF-8 bytes: the hash the API server's `shardRange` applies to
/// the field's string (`k8s.io/apimachinery/pkg/sharding.HashField`).
pub fn fnv1a64(value: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    value.bytes().fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    })
}

/// The field of an object whose hash places it on a shard. The API server's `shardRange`
/// accepts these two.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ShardKey {
    /// `metadata.uid`: objects spread evenly whatever their names or namespaces.
    #[default]
    Uid,
    /// `metadata.namespace`: a namespace's objects stay together on one shard (for
    /// controllers that read across a namespace), at the price of an uneven split when
    /// namespaces differ in size.
    Namespace,
}

impl ShardKey {
    /// The field path as `shardRange` names it.
    pub fn field_path(self) -> &'static str {
        match self {
            ShardKey::Uid => "object.metadata.uid",
            ShardKey::Namespace => "object.metadata.namespace",
        }
    }
}

/// Why a range or a set of ranges did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A range is not `0x<start>-0x<end>`.
    #[error("range {0:?} is not 0x<start>-0x<end>")]
    Syntax(String),
    /// A bound is not a hexadecimal number within 0 ..= 2^64.
    #[error("range bound {0:?} is not a hexadecimal number from 0x0 to 0x10000000000000000")]
    Bound(String),
    /// The start is not below the end.
    #[error("range {0:?} is empty: its start is not below its end")]
    Empty(String),
}

/// A half-open range `[start, end)` of 64-bit hashes; `end` may be 2^64. Never empty.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HashRange {
    /// Invariant: `start < end <= 2^64`.
    start: u128,
    end: u128,
}

impl HashRange {
    /// The whole hash space, `[0, 2^64)`.
    pub const ALL: HashRange = HashRange {
        start: 0,
        end: SPACE,
    };

    /// `[start, end)`; `None` if it would be empty or reach past 2^64.
    pub fn new(start: u128, end: u128) -> Option<HashRange> {
        (start < end && end <= SPACE).then_some(HashRange { start, end })
    }

    /// The first hash in the range.
    pub fn start(&self) -> u128 {
        self.start
    }

    /// The first hash past the range (2^64 at most).
    pub fn end(&self) -> u128 {
        self.end
    }

    /// Whether `hash` falls in the range.
    pub fn contains(&self, hash: u64) -> bool {
        let hash = u128::from(hash);
        self.start <= hash && hash < self.end
    }

    /// Whether the two ranges share a hash.
    pub fn overlaps(&self, other: &HashRange) -> bool {
        self.start < other.end && other.start < self.end
    }

    /// The fraction of the hash space the range covers.
    pub fn share(&self) -> f64 {
        (self.end - self.start) as f64 / SPACE as f64
    }

    /// `shardRange(<field>, '0x…', '0x…')` as the API server parses it: lowercase, 16
    /// hexadecimal digits, or 17 for the end 2^64 (the server refuses any other width).
    pub fn selector(&self, key: ShardKey) -> String {
        format!(
            "shardRange({}, '{}', '{}')",
            key.field_path(),
            hex(self.start),
            hex(self.end)
        )
    }
}

/// A bound in the server's spelling: `0x` and 16 digits, or `0x10000000000000000`.
fn hex(bound: u128) -> String {
    if bound == SPACE {
        "0x10000000000000000".to_owned()
    } else {
        format!("0x{bound:016x}")
    }
}

fn parse_bound(text: &str) -> Result<u128, ParseError> {
    let bad = || ParseError::Bound(text.to_owned());
    let digits = text.strip_prefix("0x").ok_or_else(bad)?;
    if digits.is_empty() || digits.len() > 17 {
        return Err(bad());
    }
    let value = u128::from_str_radix(digits, 16).map_err(|_| bad())?;
    if value > SPACE {
        return Err(bad());
    }
    Ok(value)
}

impl fmt::Display for HashRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", hex(self.start), hex(self.end))
    }
}

impl fmt::Debug for HashRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for HashRange {
    type Err = ParseError;

    /// Parses what [`Display`](fmt::Display) writes: `0x<start>-0x<end>`.
    fn from_str(text: &str) -> Result<Self, ParseError> {
        let (start, end) = text
            .trim()
            .split_once('-')
            .ok_or_else(|| ParseError::Syntax(text.to_owned()))?;
        let (start, end) = (parse_bound(start.trim())?, parse_bound(end.trim())?);
        HashRange::new(start, end).ok_or_else(|| ParseError::Empty(text.to_owned()))
    }
}

/// A set of hashes, kept as sorted, disjoint, non-adjacent [`HashRange`]s (adjacent ranges
/// are merged), so that two equal sets are equal values and print the same.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Ranges {
    /// Invariant: sorted by start; each range ends strictly before the next one starts.
    ranges: Vec<HashRange>,
}

impl Ranges {
    /// The empty set.
    pub fn none() -> Ranges {
        Ranges::default()
    }

    /// The whole hash space.
    pub fn all() -> Ranges {
        Ranges {
            ranges: vec![HashRange::ALL],
        }
    }

    /// The union of `ranges`.
    pub fn from_ranges(ranges: impl IntoIterator<Item = HashRange>) -> Ranges {
        let mut sorted: Vec<HashRange> = ranges.into_iter().collect();
        sorted.sort();
        let mut merged: Vec<HashRange> = Vec::with_capacity(sorted.len());
        for range in sorted {
            match merged.last_mut() {
                Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
                _ => merged.push(range),
            }
        }
        Ranges { ranges: merged }
    }

    /// The ranges, sorted and disjoint.
    pub fn ranges(&self) -> &[HashRange] {
        &self.ranges
    }

    /// Whether the set holds no hash.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Whether `hash` is in the set.
    pub fn contains(&self, hash: u64) -> bool {
        let wide = u128::from(hash);
        // The last range starting at or before the hash is the only candidate.
        let at = self.ranges.partition_point(|r| r.start <= wide);
        at > 0 && self.ranges[at - 1].contains(hash)
    }

    /// Whether the two sets share a hash.
    pub fn overlaps(&self, other: &Ranges) -> bool {
        !self.intersect(other).is_empty()
    }

    /// The hashes in both sets.
    pub fn intersect(&self, other: &Ranges) -> Ranges {
        let mut out = Vec::new();
        let (mut i, mut j) = (0, 0);
        while i < self.ranges.len() && j < other.ranges.len() {
            let (a, b) = (self.ranges[i], other.ranges[j]);
            if let Some(both) = HashRange::new(a.start.max(b.start), a.end.min(b.end)) {
                out.push(both);
            }
            if a.end < b.end { i += 1 } else { j += 1 }
        }
        Ranges::from_ranges(out)
    }

    /// The hashes in either set.
    pub fn union(&self, other: &Ranges) -> Ranges {
        Ranges::from_ranges(self.ranges.iter().chain(&other.ranges).copied())
    }

    /// The hashes in `self` and not in `other`.
    pub fn subtract(&self, other: &Ranges) -> Ranges {
        let mut out = Vec::new();
        for range in &self.ranges {
            let mut start = range.start;
            for cut in other.ranges.iter().filter(|c| c.overlaps(range)) {
                if let Some(kept) = HashRange::new(start, cut.start) {
                    out.push(kept);
                }
                start = start.max(cut.end);
            }
            if let Some(kept) = HashRange::new(start, range.end) {
                out.push(kept);
            }
        }
        Ranges::from_ranges(out)
    }

    /// The fraction of the hash space the set covers.
    pub fn share(&self) -> f64 {
        // `+ 0.0`: an empty sum of floats is -0.0.
        self.ranges.iter().map(HashRange::share).sum::<f64>() + 0.0
    }

    /// The `shardSelector` for the set on field `key`: its ranges joined by ` || `, the
    /// syntax the API server parses; `None` for the whole space (send no selector) and for
    /// the empty set (no selector selects nothing: do not list at all).
    pub fn selector(&self, key: ShardKey) -> Option<String> {
        if self.is_empty() || *self == Ranges::all() {
            return None;
        }
        let parts: Vec<String> = self.ranges.iter().map(|r| r.selector(key)).collect();
        Some(parts.join(" || "))
    }
}

impl fmt::Display for Ranges {
    /// Comma-separated ranges, `0x…-0x…,0x…-0x…`; nothing for the empty set. What a
    /// member's Lease publishes, and what [`FromStr`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, range) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{range}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Ranges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{self}]")
    }
}

impl FromStr for Ranges {
    type Err = ParseError;

    fn from_str(text: &str) -> Result<Self, ParseError> {
        let parts = text.split(',').map(str::trim).filter(|p| !p.is_empty());
        let ranges = parts.map(str::parse).collect::<Result<Vec<_>, _>>()?;
        Ok(Ranges::from_ranges(ranges))
    }
}

// === assignment ===

/// The number of equal buckets the hash space is cut into for [`assign`]: bucket `b` is
/// the hashes from `b × 2⁶⁴ / 120` up to `(b + 1) × 2⁶⁴ / 120`. 120, so that an equal split
/// into `n` whole buckets is exact for the `n` that divide it (2, 3, 4, 5, 6, 8, 10, 12
/// members), and within `n / 120` of `1 / n` for the others (under ±10 % up to 12
/// members), while a member's buckets still merge into a few dozen ranges (60 at most, for
/// two members: a `shardSelector` under 5 KB, which testenv's API server accepts on LIST
/// and WATCH). Equal splits matter because the busiest replica sets a sharded
/// controller's pace.
pub const BUCKETS: usize = 120;

/// Bucket `bucket`'s hashes.
fn bucket_range(bucket: usize) -> HashRange {
    let (b, n) = (bucket as u128, BUCKETS as u128);
    HashRange {
        start: SPACE * b / n,
        end: SPACE * (b + 1) / n,
    }
}

/// splitmix64's finaliser: every input bit flips each output bit with probability about
/// one half. FNV-1a alone leaves identities that differ in their last character (`pod-1`,
/// `pod-2`) with hashes that differ mostly in their low bits.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A member's weight for a bucket in the rendezvous ranking: higher wins. `member` is the
/// member's mixed hash ([`member_key`]).
fn weight(member: u64, bucket: usize) -> u64 {
    const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
    mix64(member ^ mix64((bucket as u64 + 1).wrapping_mul(GOLDEN)))
}

fn member_key(identity: &str) -> u64 {
    mix64(fnv1a64(identity))
}

/// The assignment of the [`BUCKETS`] to a set of members, with how it was reached (the
/// tests bound the buckets that move on a change of membership by it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Buckets {
    /// The members' identities, sorted, without duplicates.
    pub(crate) members: Vec<String>,
    /// Each bucket's owner, an index into `members`.
    pub(crate) owner: Vec<usize>,
    /// Each bucket's rendezvous winner among all members (an index into `members`): its
    /// owner, unless the bucket was shed.
    pub(crate) preferred: Vec<usize>,
}

impl Buckets {
    /// Assigns the buckets to `members` (see [`assign`] for how). Duplicates count once.
    pub(crate) fn assign<S: AsRef<str>>(members: &[S]) -> Buckets {
        let mut names: Vec<&str> = members.iter().map(AsRef::as_ref).collect();
        names.sort_unstable();
        names.dedup();
        let n = names.len();
        if n == 0 {
            return Buckets {
                members: Vec::new(),
                owner: Vec::new(),
                preferred: Vec::new(),
            };
        }
        let keys: Vec<u64> = names.iter().map(|m| member_key(m)).collect();
        // The highest weight among the members `room` allows; a tie (two identities of
        // equal hash) goes to the identity that sorts first.
        let best = |bucket: usize, room: &dyn Fn(usize) -> bool| -> usize {
            (0..n)
                .filter(|&i| room(i))
                .max_by_key(|&i| (weight(keys[i], bucket), std::cmp::Reverse(i)))
                .expect("the quotas leave room for every bucket")
        };
        let preferred: Vec<usize> = (0..BUCKETS).map(|b| best(b, &|_| true)).collect();
        let mut load = vec![0usize; n];
        for &i in &preferred {
            load[i] += 1;
        }
        // Quotas: `BUCKETS / n` each, one more for the `BUCKETS % n` members the ranking
        // already gave the most (ties by identity), which keeps the buckets shed fewest.
        let mut quota = vec![BUCKETS / n; n];
        let mut by_load: Vec<usize> = (0..n).collect();
        by_load.sort_by_key(|&i| (std::cmp::Reverse(load[i]), i));
        for &i in &by_load[..BUCKETS % n] {
            quota[i] += 1;
        }
        // A member over its quota keeps the buckets it weighs most and sheds the others.
        let mut owner = preferred.clone();
        let mut shed = Vec::new();
        for i in 0..n {
            if load[i] <= quota[i] {
                continue;
            }
            let mut mine: Vec<usize> = (0..BUCKETS).filter(|&b| preferred[b] == i).collect();
            mine.sort_by_key(|&b| (std::cmp::Reverse(weight(keys[i], b)), b));
            shed.extend_from_slice(&mine[quota[i]..]);
            load[i] = quota[i];
        }
        // Each shed bucket, in bucket order, goes to the member it weighs most among those
        // with room; the quotas add up to the buckets, so there is always one.
        shed.sort_unstable();
        for b in shed {
            let to = best(b, &|i| load[i] < quota[i]);
            owner[b] = to;
            load[to] += 1;
        }
        Buckets {
            members: names.into_iter().map(str::to_owned).collect(),
            owner,
            preferred,
        }
    }

    /// The ranges of member `index`'s buckets, adjacent ones merged.
    pub(crate) fn ranges_of(&self, index: usize) -> Ranges {
        let mine = (0..BUCKETS).filter(|&b| self.owner[b] == index);
        Ranges::from_ranges(mine.map(bucket_range))
    }
}

/// The ranges each member should hold, computed alike by every replica that sees the same
/// members, without talking to the others. Duplicates count once. Returns `(identity,
/// ranges)` pairs in the order of the sorted identities; nothing for no members.
///
/// The space is cut into [`BUCKETS`] equal buckets, and each bucket ranked among the
/// members by rendezvous (highest-random-weight) hashing: a well-mixed 64-bit hash of the
/// member's identity and the bucket's number. Each member gets `BUCKETS / n` buckets, or
/// one more (for `BUCKETS % n` of them), so its share is within `n / BUCKETS` of `1 / n`.
/// A bucket goes to the member that ranks it first, unless that member has more than its
/// quota: then the member keeps the buckets it ranks highest, and each bucket it sheds
/// goes to its highest-ranked member with room (shed buckets taken in bucket order).
///
/// # Implementation Details
///
/// A bucket's first choice depends only on the members' identities, so when a member
/// leaves, only the buckets it ranked first change their first choice, and when one joins,
/// only those it ranks first (about `1 / (n + 1)` of them). Every other bucket moves only
/// if it was shed before or after the change; shedding concerns the few buckets by which
/// a member's first choices exceed its quota.
pub fn assign<S: AsRef<str>>(members: &[S]) -> Vec<(String, Ranges)> {
    let buckets = Buckets::assign(members);
    (0..buckets.members.len())
        .map(|i| (buckets.members[i].clone(), buckets.ranges_of(i)))
        .collect()
}

/// The ranges [`assign`] gives `member` among `members`; empty if it is not one of them.
pub fn assigned_to<S: AsRef<str>>(members: &[S], member: &str) -> Ranges {
    let buckets = Buckets::assign(members);
    match buckets.members.iter().position(|m| m == member) {
        Some(index) => buckets.ranges_of(index),
        None => Ranges::none(),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn r(start: u128, end: u128) -> HashRange {
        HashRange::new(start, end).unwrap()
    }

    #[test]
    fn fnv1a64_matches_the_reference_vectors() {
        // The FNV reference values, as Go's hash/fnv computes them.
        assert_eq!(fnv1a64(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64("foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn a_range_is_half_open() {
        let range = r(0x10, 0x20);
        assert!(!range.contains(0x0f));
        assert!(range.contains(0x10));
        assert!(range.contains(0x1f));
        assert!(!range.contains(0x20));
        assert!(HashRange::ALL.contains(u64::MAX));
        assert!(HashRange::new(5, 5).is_none());
        assert!(HashRange::new(0, SPACE + 1).is_none());
    }

    #[test]
    fn selectors_use_the_widths_the_server_accepts() {
        let ranges = Ranges::from_ranges([r(0, 1 << 63), r(3 << 62, SPACE)]);
        assert_eq!(
            ranges.selector(ShardKey::Uid).unwrap(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || \
             shardRange(object.metadata.uid, '0xc000000000000000', '0x10000000000000000')"
        );
        assert_eq!(
            Ranges::from_ranges([r(1, 2)])
                .selector(ShardKey::Namespace)
                .unwrap(),
            "shardRange(object.metadata.namespace, '0x0000000000000001', '0x0000000000000002')"
        );
        assert_eq!(Ranges::all().selector(ShardKey::Uid), None);
        assert_eq!(Ranges::none().selector(ShardKey::Uid), None);
    }

    #[test]
    fn ranges_merge_and_print_and_parse_back() {
        let ranges = Ranges::from_ranges([r(20, 30), r(0, 10), r(10, 15), r(25, 40)]);
        assert_eq!(ranges.ranges(), &[r(0, 15), r(20, 40)]);
        let text = ranges.to_string();
        assert_eq!(
            text,
            "0x0000000000000000-0x000000000000000f,0x0000000000000014-0x0000000000000028"
        );
        assert_eq!(text.parse::<Ranges>().unwrap(), ranges);
        assert_eq!("".parse::<Ranges>().unwrap(), Ranges::none());
        let all: Ranges = "0x0-0x10000000000000000".parse().unwrap();
        assert_eq!(all, Ranges::all());
        assert!(matches!(
            "0x5-0x5".parse::<Ranges>(),
            Err(ParseError::Empty(_))
        ));
        assert!(matches!(
            "0x0-0x20000000000000000".parse::<Ranges>(),
            Err(ParseError::Bound(_))
        ));
        assert!(matches!("12".parse::<Ranges>(), Err(ParseError::Syntax(_))));
    }

    #[test]
    fn set_operations() {
        let a = Ranges::from_ranges([r(0, 10), r(20, 30)]);
        let b = Ranges::from_ranges([r(5, 25)]);
        assert_eq!(a.intersect(&b), Ranges::from_ranges([r(5, 10), r(20, 25)]));
        assert_eq!(a.union(&b), Ranges::from_ranges([r(0, 30)]));
        assert_eq!(a.subtract(&b), Ranges::from_ranges([r(0, 5), r(25, 30)]));
        assert_eq!(b.subtract(&a), Ranges::from_ranges([r(10, 20)]));
        assert!(a.overlaps(&b));
        assert!(!a.overlaps(&Ranges::from_ranges([r(10, 20)])));
        assert!(a.contains(0) && a.contains(29) && !a.contains(10) && !a.contains(30));
        assert_eq!(Ranges::all().subtract(&Ranges::all()), Ranges::none());
    }

    /// The buckets whose owner differs between two assignments, by bucket.
    fn moved(before: &Buckets, after: &Buckets) -> Vec<usize> {
        (0..BUCKETS)
            .filter(|&b| before.members[before.owner[b]] != after.members[after.owner[b]])
            .collect()
    }

    /// Whether bucket `b` was shed: its owner is not its first choice.
    fn shed(buckets: &Buckets, b: usize) -> bool {
        buckets.owner[b] != buckets.preferred[b]
    }

    /// Random identities: replica-like names that differ in a few characters, or not.
    fn identities() -> impl Strategy<Value = Vec<String>> {
        prop_oneof![
            prop::collection::btree_set("[a-z0-9-]{1,24}", 1..=12),
            (
                "[a-z]{1,12}",
                prop::collection::btree_set(0u32..10_000, 1..=12)
            )
                .prop_map(|(prefix, ids)| {
                    ids.into_iter().map(|i| format!("{prefix}-{i}")).collect()
                }),
        ]
        .prop_map(|set| set.into_iter().collect())
    }

    /// A deterministic stream of numbers for the statistical tests (splitmix64).
    struct Stream(u64);

    impl Stream {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            mix64(self.0)
        }

        /// `n` distinct identities shaped like a StatefulSet's or a Deployment's pods.
        fn identities(&mut self, n: usize) -> Vec<String> {
            let set = self.next();
            let mut out = std::collections::BTreeSet::new();
            while out.len() < n {
                let name = if set.is_multiple_of(2) {
                    format!("operator-{}", out.len())
                } else {
                    format!("operator-{:x}-{:05x}", set & 0xffff, self.next() & 0xfffff)
                };
                out.insert(name);
            }
            out.into_iter().collect()
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn every_bucket_goes_to_one_member_and_shares_are_within_a_bucket(
            members in identities()
        ) {
            let split = assign(&members);
            let n = members.len();
            prop_assert_eq!(split.len(), n);
            let mut seen = Ranges::none();
            for (member, ranges) in &split {
                prop_assert!(!seen.overlaps(ranges), "{} overlaps another", member);
                seen = seen.union(ranges);
                let buckets = (ranges.share() * BUCKETS as f64).round() as usize;
                prop_assert!(
                    buckets == BUCKETS / n || buckets == BUCKETS.div_ceil(n),
                    "{} has {} buckets among {}", member, buckets, n
                );
                // Within n / BUCKETS of 1 / n: under ±10 % for up to 12 members.
                let error = (ranges.share() * n as f64 - 1.0).abs();
                prop_assert!(error < 0.1, "{}'s share {} among {}", member, ranges.share(), n);
            }
            prop_assert_eq!(seen, Ranges::all());
        }

        #[test]
        fn a_leave_moves_only_the_leavers_first_choices_and_shed_buckets(
            members in identities(),
            pick in any::<prop::sample::Index>(),
        ) {
            prop_assume!(members.len() >= 2);
            let leaver = &members[pick.index(members.len())];
            let rest: Vec<&String> = members.iter().filter(|m| *m != leaver).collect();
            let (before, after) = (Buckets::assign(&members), Buckets::assign(&rest));
            for b in moved(&before, &after) {
                let first = &before.members[before.preferred[b]];
                prop_assert!(
                    first == leaver || shed(&before, b) || shed(&after, b),
                    "bucket {} moved though the leaver did not rank it first and it was \
                     never shed", b
                );
            }
            // Nothing is left with the leaver.
            prop_assert!(after.members.iter().all(|m| m != leaver));
        }

        #[test]
        fn a_join_moves_only_the_joiners_first_choices_and_shed_buckets(
            members in identities(),
            joiner in "[a-z0-9-]{1,24}",
        ) {
            prop_assume!(!members.contains(&joiner));
            let mut more = members.clone();
            more.push(joiner.clone());
            let (before, after) = (Buckets::assign(&members), Buckets::assign(&more));
            for b in moved(&before, &after) {
                let first = &after.members[after.preferred[b]];
                prop_assert!(
                    *first == joiner || shed(&before, b) || shed(&after, b),
                    "bucket {} moved though the joiner does not rank it first and it was \
                     never shed", b
                );
            }
        }
    }

    #[test]
    fn assignment_ignores_order_and_duplicates() {
        let one = assign(&["b", "c", "a"]);
        let two = assign(&["c", "a", "b", "a"]);
        assert_eq!(one, two);
        let names: Vec<&str> = one.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(assigned_to(&["x"], "x"), Ranges::all());
        assert_eq!(assigned_to(&["x"], "y"), Ranges::none());
        assert_eq!(assigned_to(&["b", "a", "c"], "b"), one[1].1);
        assert!(assign::<&str>(&[]).is_empty());
    }

    #[test]
    fn buckets_cut_the_space_into_equal_parts() {
        assert_eq!(
            bucket_range(0).to_string(),
            "0x0000000000000000-0x0222222222222222"
        );
        assert_eq!(
            bucket_range(BUCKETS - 1).to_string(),
            "0xfddddddddddddddd-0x10000000000000000"
        );
        let widths = (0..BUCKETS).map(|b| bucket_range(b).end() - bucket_range(b).start());
        let (least, most) = (widths.clone().min(), widths.max());
        assert!(most.unwrap() - least.unwrap() <= 1, "{least:?} {most:?}");
        let all = Ranges::from_ranges((0..BUCKETS).map(bucket_range));
        assert_eq!(all, Ranges::all());
    }

    #[test]
    fn members_that_divide_the_buckets_get_equal_shares() {
        let mut stream = Stream(120);
        for n in [2, 3, 4, 5, 6, 8, 10, 12] {
            let members = stream.identities(n);
            let buckets = Buckets::assign(&members);
            for i in 0..n {
                let mine = buckets.owner.iter().filter(|&&o| o == i).count();
                assert_eq!(mine, BUCKETS / n, "{n} members");
            }
        }
    }

    /// The mean fraction of the buckets that move when one of `n` members leaves, and
    /// when an `n + 1`-th joins, over `trials` identity sets.
    fn mean_moves(n: usize, trials: usize, stream: &mut Stream) -> (f64, f64) {
        let (mut leave, mut join) = (0, 0);
        for _ in 0..trials {
            let mut members = stream.identities(n + 1);
            let joiner = members.remove((stream.next() % (n as u64 + 1)) as usize);
            let base = Buckets::assign(&members);
            let leaver = members[(stream.next() % n as u64) as usize].clone();
            let rest: Vec<&String> = members.iter().filter(|m| **m != leaver).collect();
            leave += moved(&base, &Buckets::assign(&rest)).len();
            members.push(joiner);
            join += moved(&base, &Buckets::assign(&members)).len();
        }
        let total = (trials * BUCKETS) as f64;
        (leave as f64 / total, join as f64 / total)
    }

    #[test]
    fn moves_on_average_stay_near_the_least_possible() {
        // The least that can move: the leaver's share (1 / n), the joiner's (1 / (n + 1)).
        // Shedding adds a little (measured: 6 % to 37 % more for 3 to 8 members, the
        // most for a join of the ninth); a poorly mixed ranking, where similar names rank
        // buckets alike, sheds far more. Fixed seeds: the numbers are the same at every run.
        let mut stream = Stream(26);
        for n in 2..=8 {
            let (leave, join) = mean_moves(n, 400, &mut stream);
            let (least_leave, least_join) = (1.0 / n as f64, 1.0 / (n + 1) as f64);
            eprintln!(
                "{n} members: a leave moves {leave:.3} (least {least_leave:.3}), \
                 a join {join:.3} (least {least_join:.3})"
            );
            let fewest = (BUCKETS / n) as f64 / BUCKETS as f64;
            assert!(leave >= fewest, "the leaver's buckets always move");
            assert!(
                leave < 1.5 * least_leave,
                "{n} members: a leave moves {leave:.3}"
            );
            assert!(
                join < 1.5 * least_join,
                "{n} members: a join moves {join:.3}"
            );
        }
    }

    #[test]
    fn uids_spread_evenly_over_the_assignment() {
        // Random-looking uids (as the API server makes them) land within a few percent of
        // a third on each of three members, whose buckets are 40 of 120 each.
        let members = ["r0", "r1", "r2"];
        let split = assign(&members);
        let mut counts = [0usize; 3];
        let n = 30_000;
        for i in 0..n {
            let uid = format!(
                "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
                fnv1a64(&format!("a{i}")) as u32,
                i % 0xffff,
                i % 0xfff,
                (i * 7) % 0xfff,
                fnv1a64(&format!("b{i}")) & 0xffff_ffff_ffff
            );
            let hash = fnv1a64(&uid);
            let at = split.iter().position(|(_, r)| r.contains(hash)).unwrap();
            counts[at] += 1;
        }
        for count in counts {
            let share = count as f64 / n as f64;
            assert!((share - 1.0 / 3.0).abs() < 0.02, "{counts:?}");
        }
    }
}
