use alloc::vec::Vec;

use crate::encoding::{self, tag, Reader};
use crate::{Algorithm, Decision, DecodeError, ParamError, Report, Reserve, Ticks};

/// One member's transition (decide or reserve) from its state.
type MemberTransition<'a, A> =
    dyn Fn(&A, Option<<A as Algorithm>::State>) -> (Decision, Option<<A as Algorithm>::State>) + 'a;

/// Several limits on one key (say 10 per second and 1000 per hour), decided as one:
/// a request is admitted only if every member admits it, and only then does any
/// member's state change.
///
/// The decision reports the member with the fewest units remaining; `retry_after`,
/// `reset_after` and `delay` are the largest of the members'.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Composite<A> {
    members: Vec<A>,
}

impl<A: Algorithm> Composite<A> {
    /// All of `members` at once; at least one, at most 255.
    pub fn new(members: Vec<A>) -> Result<Self, ParamError> {
        match members.len() {
            0 => Err(ParamError::EmptyComposite),
            n => {
                let n = u64::try_from(n).unwrap_or(u64::MAX);
                ParamError::check("members", n, 1, 255)?;
                Ok(Self { members })
            }
        }
    }

    /// The member limits.
    pub fn members(&self) -> &[A] {
        &self.members
    }

    /// Decides every member with `decide`, committing only if all admit. (A trait
    /// object, not a generic: deciding and reserving share one copy of this code.)
    fn decide_all(
        &self,
        state: Option<Vec<Option<A::State>>>,
        now: Ticks,
        decide: &MemberTransition<'_, A>,
    ) -> (Decision, Option<Vec<Option<A::State>>>) {
        let old = state.unwrap_or_else(|| alloc::vec![None; self.members.len()]);
        let (decisions, new): (Vec<_>, Vec<_>) = self
            .members
            .iter()
            .zip(&old)
            .map(|(member, state)| decide(member, state.clone()))
            .unzip();
        let allowed = decisions.iter().all(|d| d.allowed);
        let retry_after = decisions
            .iter()
            .try_fold(0, |wait, d| d.retry_after.map(|r| r.max(wait)));
        // A denial has no delay, whatever the members would have waited.
        let delay = if allowed {
            decisions.iter().map(|d| d.delay).max().unwrap_or(0)
        } else {
            0
        };
        // On denial nothing moves: a zero-cost decision reports the stored states (and
        // forgets the ones that are fresh by now).
        let (reported, states): (Vec<_>, Vec<_>) = if allowed {
            (decisions, new)
        } else {
            self.members
                .iter()
                .zip(old)
                .map(|(m, s)| m.decide(s, now, 0))
                .unzip()
        };
        let binding = reported.iter().min_by_key(|d| d.remaining);
        let decision = Decision {
            allowed,
            limit: binding.map_or(0, |d| d.limit),
            remaining: binding.map_or(0, |d| d.remaining),
            retry_after,
            reset_after: reported.iter().map(|d| d.reset_after).max().unwrap_or(0),
            delay,
        };
        let fresh = states.iter().all(Option::is_none);
        (decision, (!fresh).then_some(states))
    }
}

impl<A: Algorithm> Algorithm for Composite<A> {
    type State = Vec<Option<A::State>>;

    fn decide(
        &self,
        state: Option<Self::State>,
        now: Ticks,
        cost: u64,
    ) -> (Decision, Option<Self::State>) {
        self.decide_all(state, now, &|member, s| member.decide(s, now, cost))
    }

    fn encode<E: Extend<u8>>(&self, state: &Self::State, out: &mut E) {
        let len = state.len() as u64;
        encoding::write(out, tag::COMPOSITE, &[len]);
        for (member, state) in self.members.iter().zip(state) {
            let bytes = state
                .as_ref()
                .map(|s| member.encode_to_vec(s))
                .unwrap_or_default();
            out.extend((bytes.len() as u64).to_be_bytes());
            out.extend(bytes);
        }
    }

    /// A state per member, in a vector built at its length (never below four, the
    /// least a vector allocates), and what each member's state holds.
    fn max_heap_bytes(&self) -> usize {
        let states = self.members.len().max(4);
        let own = states.saturating_mul(core::mem::size_of::<Option<A::State>>());
        self.members
            .iter()
            .fold(own, |sum, m| sum.saturating_add(m.max_heap_bytes()))
    }

    fn decode(&self, bytes: &[u8]) -> Result<Self::State, DecodeError> {
        let mut reader = Reader::new(bytes, tag::COMPOSITE)?;
        let members = self.members.len() as u64;
        reader.u64_where("len", &|n| n == members)?;
        let mut states = Vec::with_capacity(self.members.len());
        for member in &self.members {
            let len = reader.u64()?;
            let len = usize::try_from(len).map_err(|_| DecodeError::InvalidField {
                field: "member_len",
            })?;
            let bytes = reader.take(len)?;
            states.push(if bytes.is_empty() {
                None
            } else {
                Some(member.decode(bytes)?)
            });
        }
        reader.finish()?;
        Ok(states)
    }
}

/// A report charges every member within its own overdraft: each records what it can,
/// and the composite reports the least any member recorded.
impl<A: Report> Report for Composite<A> {
    /// The least of the members': the most every member records.
    fn overdraft(&self) -> u64 {
        self.members
            .iter()
            .map(Report::overdraft)
            .min()
            .unwrap_or(0)
    }

    fn adjust(
        &self,
        state: Option<Self::State>,
        now: Ticks,
        adjustment: i64,
    ) -> (u64, Option<Self::State>) {
        let old = state.unwrap_or_else(|| alloc::vec![None; self.members.len()]);
        let (recorded, states): (Vec<_>, Vec<_>) = self
            .members
            .iter()
            .zip(old)
            .map(|(member, state)| member.adjust(state, now, adjustment))
            .unzip();
        let fresh = states.iter().all(Option::is_none);
        let recorded = recorded.into_iter().min().unwrap_or(0);
        (recorded, (!fresh).then_some(states))
    }
}

impl<A: Reserve> Reserve for Composite<A> {
    fn reserve(
        &self,
        state: Option<Self::State>,
        now: Ticks,
        cost: u64,
        max_wait: Ticks,
    ) -> (Decision, Option<Self::State>) {
        self.decide_all(state, now, &|member, s| {
            member.reserve(s, now, cost, max_wait)
        })
    }
}
