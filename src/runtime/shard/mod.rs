//! Sharded controllers: several replicas of one operator split a controller's objects by
//! hash ranges, with no coordinator, and never reconcile one key in two replicas at once.
//!
//! # Map
//!
//! * [`ranges`] — the hash ([`fnv1a64`] of `metadata.uid`, or of `metadata.namespace`),
//!   half-open [`HashRange`]s over `[0, 2^64)`, sets of them ([`Ranges`]), the
//!   `shardSelector` they make, and the split among members ([`assign`]).
//! * [`Shard`] — one replica's membership: its Lease, the ranges it holds, and the gate
//!   ([`Shard::admit`]) a sharded controller's workers pass before each reconcile.
//! * [`cache`] — the caches hold only the replica's ranges: the controller's kind by its
//!   uid (server-side `shardSelector` where served, the same hash in the client always),
//!   owned kinds by their controller owner's uid; a move of the ranges relists.
//! * [`controller`] — the worker's side: a key's hash from the cached primary object, the
//!   gate, the keys of newly acquired ranges queued again, the cache's size logged.
//!   The workers drop a reconcile (or an `on_delete`) whose [`Permit`] is revoked.
//!
//! # Opting in
//!
//! [`Manager::shard`](super::Manager::shard) shards every controller completed after it;
//! an operator built on [`ManagerArgs`](super::ManagerArgs) gets it from the `--shard`
//! flag (with `--shard-identity`, `--shard-namespace`, and the `--leader-elect-*`
//! timings), which turns leader election off: every replica runs its controllers.
//!
//! ```no_run
//! use controller_runtime::runtime::shard::{Shard, ShardConfig};
//! use controller_runtime::runtime::{Manager, ManagerOptions};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let manager = Manager::new(ManagerOptions::default()).await?;
//! let config = ShardConfig::new("memcached-operator", "memcached-system", "pod-0");
//! manager.shard(Shard::new(manager.client(), config)?)?;
//! // ...then the controllers, as without sharding.
//! # Ok(())
//! # }
//! ```
//!
//! Each reconcile (and `on_delete`) of a sharded controller logs `shard reconcile started`
//! and `shard reconcile ended` (info) in its `reconcile` span, which carries `replica`,
//! `range` (the held range the key falls in) and `term`; one dropped at the fence logs
//! `shard reconcile aborted` (warn) before it ends. `shard ranges active` logs each change of a
//! replica's active ranges. That is what the cluster test's and `make bench-shard`'s audits
//! read. A relist after a move of the ranges hands every cached object over again
//! unchanged; a sharded controller does not queue those (unless a resync period is set),
//! since nothing changed and the keys of newly held ranges are queued anyway.
//!
//! ```text
//!  Lease per replica (holds, term) ◀──write / list──▶ Shard::run: observe ─▶ assign ─▶ plan
//!                                                         │ active ranges
//!                     queue ─▶ worker ─▶ Shard::admit(hash of the object's uid) ─▶ reconcile
//!                                        (none: not this replica's key; skipped)
//! ```
//!
//! # What the API server offers (Kubernetes 1.36, KEP-5866)
//!
//! Read from `k8s.io/apiserver` and `k8s.io/apimachinery` v0.36.3 (the version testenv
//! builds):
//!
//! * **Gate.** `ShardedListAndWatch`, alpha, off by default; testenv turns it on
//!   (`--feature-gates=ShardedListAndWatch=true` on kube-apiserver).
//! * **Parameter.** `shardSelector` on LIST and WATCH (a `ListOptions` field, so a query
//!   parameter of the same name), for every resource served by the generic registry store,
//!   custom resources included, from etcd and from the watch cache alike.
//! * **Syntax.** A CEL expression of `shardRange(<field>, '<start>', '<end>')` calls joined
//!   by `||` (so several ranges OR together); no other function or operator. `<field>` is
//!   `object.metadata.uid` or `object.metadata.namespace`, the same field in every call.
//!   The bounds are single-quoted, `0x` and exactly 16 lowercase hexadecimal digits, or
//!   `0x10000000000000000` (2^64) for an end; start inclusive, end exclusive, start below
//!   end. Any other width is refused (400), so `'0x0'` is not accepted.
//! * **Hash.** 64-bit FNV-1a of the field's string value (Go's `hash/fnv` `New64a`).
//! * **How a client knows it was applied.** A list response of a built-in kind carries
//!   `metadata.shardInfo.selector`, the selector echoed back. A server without the gate
//!   (or older than 1.36) ignores the parameter silently and returns everything, without
//!   `shardInfo`. Custom resources' lists are unstructured and carry no `shardInfo` even
//!   when the selector was applied; watch events never say. So the client cannot always
//!   tell: it filters by the same hash itself in every case, and the server-side selector
//!   only saves bytes and memory where it is served.
//!
//! # Ranges and their assignment
//!
//! A key's hash is [`fnv1a64`] of its object's `metadata.uid` ([`ShardKey::Uid`], the
//! default) or `metadata.namespace` ([`ShardKey::Namespace`]). The space is cut into
//! [`BUCKETS`](ranges::BUCKETS) (120) equal buckets, and [`assign`] gives each live member
//! `120 / n` of them or one more, so its share is exactly `1 / n` for 2, 3, 4, 5, 6, 8,
//! 10 or 12 members and within `n / 120` of it otherwise (±10 % up to 12 members); a
//! member's adjacent buckets merge into one range. Which buckets: each is ranked among
//! the members by rendezvous hashing (a well-mixed hash of the identity and the bucket),
//! and goes to its first choice unless that member got more than its quota;
//! such a member keeps the buckets it ranks highest and sheds the rest, each to its
//! highest-ranked member with room. Every member that sees the same members computes the
//! same assignment.
//!
//! A bucket's first choice depends on nothing but the identities, so a leave moves the
//! leaver's buckets and a join the joiner's first choices, plus the few buckets shed before
//! or after the change. Measured over random identities, a leave of one of three members
//! moves 35 % of the space on average (its third, and 2 % shed), a join of a third 36 %
//! (the least possible is its third). The protocol below makes each move safe, at the
//! price of a pause of a few retry periods on the moved ranges.
//!
//! # Membership without a coordinator
//!
//! Each replica keeps one `coordination.k8s.io/v1` Lease, named from the controller set
//! and its identity ([`ShardConfig::lease_name`]), labelled
//! [`SET_LABEL`](member::SET_LABEL)` = <set>`, renewed every `retry_period` (2 s) with a
//! `leaseDurationSeconds` of 15, as leader election does. Its annotations publish the ranges
//! the replica *holds* ([`HOLDS_ANNOTATION`](member::HOLDS_ANNOTATION)) and its *term*
//! ([`TERM_ANNOTATION`](member::TERM_ANNOTATION)), a number raised each time those ranges
//! change. Each round a member writes its Lease, then lists the set's Leases (a consistent
//! read). Another member is *live* while its Lease's resourceVersion has changed within its
//! lease duration, by this replica's own monotonic clock from when it first saw that
//! version: renew times written by other machines are never compared with this clock.
//!
//! A member distinguishes what it *publishes* (the ranges in its Lease) from what it keeps
//! *active* (the ranges whose keys [`Shard::admit`] lets through); active ⊆ published. One
//! round, after a successful write and the list that followed it:
//!
//! 1. **Verify claims.** A published range not yet active is a claim. If another live
//!    member publishes any of its hashes, that part is withdrawn (unpublished, never
//!    active); the rest, if still assigned to this member, becomes active.
//! 2. **Give up.** Ranges published but no longer assigned stop being admitted at once
//!    (under the same lock that counts keys in flight); they are unpublished only once no
//!    key in them is in flight (a later round, if one is).
//! 3. **Claim.** Assigned ranges that no live member publishes are published; they become
//!    active at a later round, once step 1 verified them.
//! 4. **Fence.** [`Shard::admit`] refuses everything once `renew_deadline` (10 s) has
//!    passed since the last successful write *began*, and the permits in flight are
//!    revoked then; the next write after that publishes nothing, so the member starts
//!    over. A key of an active range refused at the fence is queued again with backoff
//!    ([`Refused::Fenced`]): a renewal that began before the fence may still succeed and
//!    keep the ranges as they were.
//!
//! On shutdown a member stops admitting, waits for its keys in flight (at most
//! `renew_deadline`) and deletes its Lease, so the others claim its ranges at once.
//!
//! # Why no key is reconciled by two replicas at once
//!
//! A member admits a key only in an active range, and a range becomes active only after a
//! write that published it was followed by a list that showed no other live member
//! publishing any of it. Take two members X and Y and a hash h.
//!
//! * **Rival claims.** Both claim h: each wrote its claim, then listed. List and write are
//!   linearizable (etcd), so the later of the two lists sees the earlier write; that member
//!   sees the rival claim, and a freshly written Lease is live to everyone (its version just
//!   changed), so it withdraws. At most one of them activates h.
//! * **Hand-over.** X holds h and gives it up: it stops admitting h, waits for its keys in
//!   flight, and only then writes a Lease without h. Y can see h free only in that Lease,
//!   so Y claims h after X has stopped. While X's Lease still publishes h, Y never claims it.
//! * **A member that dies or is cut off.** Y may ignore X's Lease only when X's version has
//!   not changed for a lease duration on Y's clock. X's last successful write began at t0
//!   and Y saw its result after t0, so Y ignores it no earlier than t0 + 15 s. X stops
//!   admitting at t0 + 10 s (its fence), and a write X began before then ends (by its request
//!   timeout, at most `lease_duration - renew_deadline`) before t0 + 15 s, so a renewal
//!   cannot revive a Lease the others already treat as gone. This assumes the two clocks
//!   run at about the same *rate*, never that they agree.
//!
//! * **A key still running at the fence.** A reconcile admitted before the fence may
//!   still run after it, and the member cannot unpublish anything while cut off. So each
//!   [`Permit`] is [revoked](Permit::revoked) at the fence (unless a renewal moved it), and
//!   the worker drops the reconcile's future then, logs `shard reconcile aborted` (warn)
//!   and `shard reconcile ended`, and retries the key with backoff, which the gate refuses
//!   unless the range is held again by then. That happens `lease_duration -
//!   renew_deadline` (5 s) before any other member may start on the key. Dropping a
//!   future stops it at its next `.await`: a reconcile that blocks a thread cannot be
//!   stopped (reconciles must not block), and work it handed to tasks of its own is not
//!   stopped either. On leaving, a member whose keys are still in flight after
//!   `renew_deadline` keeps its Lease (the others wait it out) rather than delete it.
//!
//! # Deleted objects (`on_delete`)
//!
//! A sharded controller's [`on_delete`](super::Controller::on_delete) runs on the replica
//! whose active ranges hold the deleted object's hash (from its last state), under a
//! [`Permit`] of that hash like a reconcile: the range is not given up while it runs, and
//! it is dropped at the fence.
//!
//! * A delete is kept only when its object's hash is in the active ranges as the delete
//!   arrives. This also discards what a relist drops from the cache after a range was
//!   given up: those objects were not deleted, they left this replica's shard.
//! * When its turn comes, a kept delete whose range this replica no longer holds (being
//!   given up, or lost at the fence) is dropped, logged, and not run here: the range's
//!   new owner runs it if its cache held the object when it was deleted. A delete that
//!   falls between the old owner closing the range and the new owner's cache listing it
//!   runs nowhere, like a delete while no replica runs: hold a
//!   [finalizer](super::finalizer) where a delete must never be missed.
//!
//! # Watched kinds (`watches`)
//!
//! A kind wired with [`watches`](super::Controller::watches) maps its objects to primary
//! keys through the user's function, so nothing in a watched object says which shard it
//! concerns: one object may name primaries of every range, and a name's uid (hence its
//! hash) is known only once that primary is cached. Its cache is therefore **not
//! filtered**: every replica caches every object of a watched kind (its memory does not
//! shrink with the number of replicas; prefer [`owns`](super::Controller::owns) where an
//! owner reference exists, or the namespace key). Filtering it by "maps to a primary in my
//! ranges" would tie the watched cache to the primary cache and to the function's answer
//! at the time, and lose objects that come to matter later (a primary created after the
//! watched object). What is filtered is the keys: a mapped key whose primary object is not
//! cached in the active ranges is not queued, and the worker's gate refuses any that
//! slips through (its primary is hashed from the cache at admission).

pub mod cache;
pub mod controller;
pub mod member;
pub mod ranges;

pub use member::{Holding, MemberView, Permit, Refused, Shard, ShardConfig};
pub use ranges::{HashRange, Ranges, ShardKey, assign, fnv1a64};
