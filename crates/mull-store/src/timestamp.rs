//! How `at` is stored: fixed-width RFC 3339 with microseconds and `Z`
//! (`2025-01-01T00:00:00.000000Z`), so that text order is time order and a JSONL export
//! round-trips byte for byte.

use chrono::{DateTime, SecondsFormat, SubsecRound, Utc};

/// Drops what the log cannot keep (anything below a microsecond), so that an envelope returned
/// by `append` equals the one read back.
pub fn truncate(at: DateTime<Utc>) -> DateTime<Utc> {
    at.trunc_subsecs(6)
}

/// The stored text of a timestamp.
pub fn format(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Parses the stored form; `None` when the text is not exactly what [`format`] writes.
pub fn parse(text: &str) -> Option<DateTime<Utc>> {
    // Fixed width check first: it rejects offsets, missing fractions and other precisions.
    if text.len() != 27 || !text.ends_with('Z') || text.as_bytes().get(19) != Some(&b'.') {
        return None;
    }
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn fixed_width_and_round_trip() {
        let at = Utc
            .with_ymd_and_hms(2025, 1, 1, 0, 0, 0)
            .single()
            .expect("valid date");
        let text = format(at);
        assert_eq!(text, "2025-01-01T00:00:00.000000Z");
        assert_eq!(parse(&text), Some(at));
    }

    #[test]
    fn text_order_is_time_order() {
        let a = DateTime::from_timestamp_micros(1_735_689_600_000_001).expect("valid");
        let b = DateTime::from_timestamp_micros(1_735_689_600_100_000).expect("valid");
        assert!(format(a) < format(b));
    }

    #[test]
    fn nanoseconds_are_truncated() {
        let at = DateTime::from_timestamp(1_735_689_600, 123_456_789).expect("valid");
        assert_eq!(format(truncate(at)), "2025-01-01T00:00:00.123456Z");
    }

    #[test]
    fn other_forms_are_refused() {
        assert_eq!(parse("2025-01-01T00:00:00Z"), None);
        assert_eq!(parse("2025-01-01T00:00:00.000000+00:00"), None);
        assert_eq!(parse("2025-01-01T00:00:00.000Z"), None);
        assert_eq!(parse("not a time at all, 27 chars"), None);
    }
}
