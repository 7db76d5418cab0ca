//! Instants and durations with an exact fractional part, so a rate of `R` per `P` ticks
//! never rounds: a value is `ticks + frac / denom`, with `frac < denom`.

use crate::{Ticks, MAX_TICKS};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Exact {
    /// Whole ticks.
    pub ticks: Ticks,
    /// The fraction of a tick, in units of `1 / denom`.
    pub frac: u64,
}

impl Exact {
    pub const fn whole(ticks: Ticks) -> Self {
        Self { ticks, frac: 0 }
    }

    /// `self + other`, saturating at [`MAX_TICKS`].
    pub fn add(self, other: Self, denom: u64) -> Self {
        let frac = self.frac + other.frac;
        let (frac, carry) = if frac >= denom {
            (frac - denom, 1)
        } else {
            (frac, 0)
        };
        let ticks = self.ticks.saturating_add(other.ticks).saturating_add(carry);
        if ticks >= MAX_TICKS {
            Self::whole(MAX_TICKS)
        } else {
            Self { ticks, frac }
        }
    }

    /// `self - other`, or zero if `other` is larger.
    pub fn saturating_sub(self, other: Self, denom: u64) -> Self {
        if self <= other {
            Self::default()
        } else if self.frac >= other.frac {
            Self {
                ticks: self.ticks - other.ticks,
                frac: self.frac - other.frac,
            }
        } else {
            Self {
                ticks: self.ticks - other.ticks - 1,
                frac: self.frac + denom - other.frac,
            }
        }
    }

    /// The smallest whole tick count not below `self`.
    pub const fn ceil(self) -> Ticks {
        self.ticks + (self.frac > 0) as u64
    }
}

/// `n / d` for a 128-bit `n`, with the common case on 64-bit division.
pub(crate) fn div_wide(n: u128, d: u64) -> u128 {
    match u64::try_from(n) {
        Ok(n) => u128::from(n / d),
        Err(_) => n / u128::from(d),
    }
}
