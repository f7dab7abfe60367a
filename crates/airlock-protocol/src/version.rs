//! Protocol version negotiation.
//!
//! Each side announces the inclusive range of versions it speaks. The highest version both
//! speak wins, which is the *lower* of the two maxima ("the lower common version wins"): a new
//! host talking to an old guest speaks the guest's newest version, and vice versa. Without an
//! overlap the peer is refused with [`VersionError::NoOverlap`], naming both ranges.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The oldest protocol version this build speaks.
pub const MIN_VERSION: u32 = 1;
/// The newest protocol version this build speaks.
pub const MAX_VERSION: u32 = 3;

/// An inclusive range of protocol versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VersionRange {
    /// Oldest version spoken.
    pub min: u32,
    /// Newest version spoken.
    pub max: u32,
}

impl VersionRange {
    /// The range this build speaks.
    pub const CURRENT: VersionRange = VersionRange {
        min: MIN_VERSION,
        max: MAX_VERSION,
    };

    /// Whether the range is well formed (`min <= max`, and version 0 is never valid).
    pub fn is_valid(self) -> bool {
        self.min >= 1 && self.min <= self.max
    }
}

impl fmt::Display for VersionRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max {
            write!(f, "{}", self.min)
        } else {
            write!(f, "{}..={}", self.min, self.max)
        }
    }
}

/// Why two peers could not agree on a version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    /// The ranges do not overlap.
    #[error("protocol version mismatch: this side speaks version {ours}, the peer speaks version {theirs}; upgrade the older of the two")]
    NoOverlap {
        /// The local range.
        ours: VersionRange,
        /// The peer's range.
        theirs: VersionRange,
    },
    /// The peer announced an empty or zero range.
    #[error("the peer announced an invalid version range {theirs}")]
    InvalidRange {
        /// The peer's range.
        theirs: VersionRange,
    },
}

/// Picks the version to speak: the highest version in both ranges.
pub fn negotiate(ours: VersionRange, theirs: VersionRange) -> Result<u32, VersionError> {
    if !theirs.is_valid() {
        return Err(VersionError::InvalidRange { theirs });
    }
    let high = ours.max.min(theirs.max);
    let low = ours.min.max(theirs.min);
    if high < low {
        return Err(VersionError::NoOverlap { ours, theirs });
    }
    Ok(high)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(min: u32, max: u32) -> VersionRange {
        VersionRange { min, max }
    }

    #[test]
    fn the_lower_of_the_two_maxima_wins() {
        assert_eq!(negotiate(r(1, 3), r(1, 2)), Ok(2));
        assert_eq!(negotiate(r(1, 2), r(1, 3)), Ok(2));
        assert_eq!(negotiate(r(2, 5), r(4, 9)), Ok(5));
        assert_eq!(negotiate(r(1, 1), r(1, 1)), Ok(1));
    }

    #[test]
    fn disjoint_ranges_are_refused_naming_both_versions() {
        let err = negotiate(r(3, 4), r(1, 2)).unwrap_err();
        assert_eq!(
            err,
            VersionError::NoOverlap {
                ours: r(3, 4),
                theirs: r(1, 2)
            }
        );
        let text = err.to_string();
        assert!(text.contains("3..=4") && text.contains("1..=2"), "{text}");
    }

    #[test]
    fn empty_or_zero_peer_range_is_refused() {
        assert!(matches!(
            negotiate(r(1, 1), r(2, 1)),
            Err(VersionError::InvalidRange { .. })
        ));
        assert!(matches!(
            negotiate(r(1, 1), r(0, 1)),
            Err(VersionError::InvalidRange { .. })
        ));
    }
}
