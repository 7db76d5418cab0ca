//! One limit shared among subscribers by their demand (Envoy's quota protocol, RLQS):
//! max-min fair water-filling in integers, with a floor per subscriber, headroom over
//! measured demand and hysteresis against small moves.
//!
//! The shares of a `limit` (units per period, whatever the period) are:
//! 1. `floor` for everyone, lowered to `limit / n` (rounded down) when `n` floors do not
//!    fit, so that some get 0 when `limit < n`;
//! 2. each subscriber wants its demand plus `headroom_percent` (rounded up), at least
//!    the floor;
//! 3. if the wants fit, each gets its want and the spare is split equally (the first
//!    ones by index take the remainder); otherwise a level is found so that each gets
//!    `min(want, level)`, and the units left (fewer than the subscribers above the level)
//!    go one each to the first of those; either way the shares sum to `limit`;
//! 4. a subscriber's live share is kept when the new one is within
//!    `hysteresis_percent` of it or one unit (a small demand's count jitters by one), as
//!    long as the sum stays within the limit, the floor holds, and with no spare, the
//!    want holds.
//!
//! A [`Ledger`] keeps one limit's subscribers for hosts where some of them are served
//! elsewhere (another replica): [`Ledger::targets`] shares the limit less one floor kept
//! back for a joiner, and [`grant`] hands the caller's subscribers their targets only
//! within the room the others' live shares leave, so that live shares never sum past
//! the limit while a shrink waits for its holder.

/// How a limit is shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sharing {
    /// The least share of a subscriber while the limit allows one for each.
    pub floor: u64,
    /// Percent added to a subscriber's demand, so that it can grow before it is measured.
    pub headroom_percent: u64,
    /// A live share moves only when the new one differs by more than this percent of it.
    pub hysteresis_percent: u64,
}

/// One subscriber's claim: its measured demand and the share it holds now, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Claim {
    /// Units per period it asked for lately (0 when not measured yet).
    pub demand: u64,
    /// The share it was last assigned, still live.
    pub current: Option<u64>,
}

/// The claims and the shares slices differ in length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{claims} claims but room for {shares} shares")]
pub struct ShareError {
    /// How many claims were given.
    pub claims: usize,
    /// How many shares were given room for.
    pub shares: usize,
}

impl Sharing {
    /// The floor every subscriber gets among `n` of `limit`.
    pub fn floor_among(&self, limit: u64, n: usize) -> u64 {
        match u64::try_from(n) {
            Ok(0) => self.floor,
            Ok(n) => self.floor.min(limit / n),
            Err(_) => 0,
        }
    }

    /// What a subscriber of `demand` wants: its demand plus headroom, at least `floor`.
    pub fn want(&self, demand: u64, floor: u64) -> u64 {
        let demand = u128::from(demand);
        let extra = (demand * u128::from(self.headroom_percent)).div_ceil(100);
        u64::try_from(demand + extra).unwrap_or(u64::MAX).max(floor)
    }

    /// Writes into `shares` each claim's share of `limit` (see the module's steps).
    pub fn share(
        &self,
        limit: u64,
        claims: &[Claim],
        shares: &mut [u64],
    ) -> Result<(), ShareError> {
        if claims.len() != shares.len() {
            return Err(ShareError {
                claims: claims.len(),
                shares: shares.len(),
            });
        }
        if claims.is_empty() {
            return Ok(());
        }
        let floor = self.floor_among(limit, claims.len());
        let want = |c: &Claim| self.want(c.demand, floor).min(limit);
        let wanted: u128 = claims.iter().map(|c| u128::from(want(c))).sum();
        let spare = wanted <= u128::from(limit);
        if spare {
            fill_with_spare(limit, claims, shares, &want);
        } else {
            fill_to_level(limit, floor, claims, shares, &want);
        }
        self.hold(limit, floor, spare, claims, shares, &want);
        Ok(())
    }

    /// Keeps live shares within the hysteresis of their new ones, while the limit, the
    /// floor and (with no spare) the want allow.
    fn hold(
        &self,
        limit: u64,
        floor: u64,
        spare: bool,
        claims: &[Claim],
        shares: &mut [u64],
        want: &impl Fn(&Claim) -> u64,
    ) {
        let near = |current: u64, new: u64| {
            let by = current.abs_diff(new);
            by <= 1
                || u128::from(by) * 100 <= u128::from(current) * u128::from(self.hysteresis_percent)
        };
        let keeps = |c: &Claim, new: u64| {
            c.current
                .filter(|&current| current >= floor && near(current, new))
        };
        // Shrinking to a live share first frees room for growing to one.
        for (claim, share) in claims.iter().zip(shares.iter_mut()) {
            if let Some(current) = keeps(claim, *share).filter(|&c| c <= *share) {
                *share = current;
            }
        }
        let used: u128 = shares.iter().map(|&s| u128::from(s)).sum();
        let mut room = u128::from(limit).saturating_sub(used);
        for (claim, share) in claims.iter().zip(shares.iter_mut()) {
            let Some(current) = keeps(claim, *share).filter(|&c| c > *share) else {
                continue;
            };
            let more = u128::from(current - *share);
            if more <= room && (spare || current <= want(claim)) {
                room -= more;
                *share = current;
            }
        }
    }
}

/// Every want fits: each gets it, and the spare is split equally.
fn fill_with_spare(
    limit: u64,
    claims: &[Claim],
    shares: &mut [u64],
    want: &impl Fn(&Claim) -> u64,
) {
    let n = claims.len() as u64;
    let wanted: u64 = claims.iter().map(want).sum();
    let spare = limit - wanted;
    let (each, first) = (spare / n, spare % n);
    for (i, (claim, share)) in claims.iter().zip(shares.iter_mut()).enumerate() {
        *share = want(claim) + each + u64::from((i as u64) < first);
    }
}

/// The wants do not fit: the highest level whose capped wants fit, and the units left
/// one each to the first subscribers above it.
fn fill_to_level(
    limit: u64,
    floor: u64,
    claims: &[Claim],
    shares: &mut [u64],
    want: &impl Fn(&Claim) -> u64,
) {
    let under =
        |level: u64| -> u128 { claims.iter().map(|c| u128::from(want(c).min(level))).sum() };
    // `floor` fits (the floor is at most limit / n); `limit` does not (the wants don't).
    let (mut fits, mut over) = (floor, limit);
    while over - fits > 1 {
        let mid = fits + (over - fits) / 2;
        if under(mid) <= u128::from(limit) {
            fits = mid;
        } else {
            over = mid;
        }
    }
    let mut left = u128::from(limit) - under(fits);
    for (claim, share) in claims.iter().zip(shares.iter_mut()) {
        let capped = want(claim).min(fits);
        let one = u64::from(left > 0 && want(claim) > fits);
        left -= u128::from(one);
        *share = capped + one;
    }
}

/// How a ledger shares a limit among `n` subscribers: a floor of `1 / floor_divisor` of
/// an equal split (at least 1), and one floor kept back for a joiner while `n + 1`
/// floors fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ledger {
    /// The floor is the equal split divided by this (0 counts as 1).
    pub floor_divisor: u64,
    /// Percent added to a subscriber's demand.
    pub headroom_percent: u64,
    /// A target moves only when the new one differs by more than this percent of it.
    pub hysteresis_percent: u64,
}

/// One subscriber as a ledger keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Holding {
    /// Units per period it asked for lately.
    pub demand: u64,
    /// The share last computed for it, if any.
    pub target: Option<u64>,
    /// The share its proxy holds now, if any.
    pub live: Option<u64>,
}

impl Ledger {
    /// The sharing of `limit` among `n` subscribers, and the units kept back for a joiner.
    pub fn sharing(&self, limit: u64, n: usize) -> (Sharing, u64) {
        let n = u64::try_from(n).unwrap_or(u64::MAX).max(1);
        let floor = (limit / n / self.floor_divisor.max(1)).max(1);
        let reserve = floor.min(limit / n.saturating_add(1));
        let sharing = Sharing {
            floor,
            headroom_percent: self.headroom_percent,
            hysteresis_percent: self.hysteresis_percent,
        };
        (sharing, reserve)
    }

    /// Writes into `targets` each claim's share of `limit` less the reserve (each
    /// claim's `current` is its holding's last target).
    pub fn targets(
        &self,
        limit: u64,
        claims: &[Claim],
        targets: &mut [u64],
    ) -> Result<(), ShareError> {
        let (sharing, reserve) = self.sharing(limit, claims.len());
        sharing.share(limit - reserve, claims, targets)
    }
}

/// Grants each holding `mine` picks its target: at once where it shrinks (or stays), and
/// where it grows, only within the room left by every other holding's larger of live
/// share and target, after the shrinks (never below its live share). A grant becomes the
/// holding's live share.
pub fn grant(limit: u64, holdings: &mut [Holding], mine: impl Fn(usize) -> bool) {
    let held = |h: &Holding| u128::from(h.live.unwrap_or(0).max(h.target.unwrap_or(0)));
    let grows = |h: &Holding| h.target.unwrap_or(0) > h.live.unwrap_or(0);
    for (i, holding) in holdings.iter_mut().enumerate() {
        if mine(i) && !grows(holding) {
            holding.live = Some(holding.target.unwrap_or(0));
        }
    }
    let mut total: u128 = holdings.iter().map(held).sum();
    for (i, holding) in holdings.iter_mut().enumerate() {
        if !mine(i) || !grows(holding) {
            continue;
        }
        let others = total - held(holding);
        let room = u128::from(limit).saturating_sub(others);
        let target = u128::from(holding.target.unwrap_or(0));
        let live = u128::from(holding.live.unwrap_or(0));
        // Room short of the live share keeps it: a grower never shrinks.
        holding.live = Some(u64::try_from(room.min(target).max(live)).unwrap_or(0));
        total = others + held(holding);
    }
}
