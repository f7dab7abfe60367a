//! Wall-clock helpers without a date library: RFC 3339 timestamps for the audit log and
//! calendar dates for certificate validity.

use std::time::{SystemTime, UNIX_EPOCH};

use airlock_core::records::civil_from_days;

/// Seconds and milliseconds since the Unix epoch, now.
fn now() -> (i64, u32) {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_secs() as i64, d.subsec_millis())
}

/// Today as days since the Unix epoch.
pub fn today() -> i64 {
    now().0.div_euclid(86_400)
}

/// Today's date shifted by `offset_days`.
pub fn date_from_today(offset_days: i64) -> (i32, u8, u8) {
    civil_from_days(today() + offset_days)
}

/// Now as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339_now() -> String {
    let (secs, millis) = now();
    let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_have_the_rfc3339_shape() {
        let t = rfc3339_now();
        assert_eq!(t.len(), 24, "{t}");
        assert!(t.ends_with('Z') && t.as_bytes()[10] == b'T', "{t}");
    }
}
