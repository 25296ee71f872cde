//! How `at` is kept: stored as microseconds since the Unix epoch (UTC), an integer that sorts
//! in time order and costs no formatting per row; written in JSONL exports as fixed-width
//! RFC 3339 with microseconds and `Z` (`2025-01-01T00:00:00.000000Z`), so that an export
//! round-trips byte for byte.

use chrono::{DateTime, Datelike, NaiveDate, SecondsFormat, SubsecRound, Timelike, Utc};

/// Drops what the log cannot keep (anything below a microsecond), so that an envelope returned
/// by `append` equals the one read back.
pub fn truncate(at: DateTime<Utc>) -> DateTime<Utc> {
    at.trunc_subsecs(6)
}

/// The stored value of a timestamp (after [`truncate`]): microseconds since the epoch.
pub fn to_stored(at: DateTime<Utc>) -> i64 {
    at.timestamp_micros()
}

/// A stored value read back; `None` when it is outside the range of dates chrono can hold.
pub fn from_stored(micros: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_micros(micros)
}

/// The exported text of a timestamp.
pub fn format(at: DateTime<Utc>) -> String {
    let t = at.naive_utc();
    let micros = t.nanosecond() / 1000;
    // Years outside 0..=9999 and leap seconds do not fit the fixed width: let chrono write them.
    if !(0..=9999).contains(&t.year()) || micros > 999_999 {
        return at.to_rfc3339_opts(SecondsFormat::Micros, true);
    }
    let mut buf = *b"0000-00-00T00:00:00.000000Z";
    put_digits(&mut buf[0..4], t.year() as u32);
    put_digits(&mut buf[5..7], t.month());
    put_digits(&mut buf[8..10], t.day());
    put_digits(&mut buf[11..13], t.hour());
    put_digits(&mut buf[14..16], t.minute());
    put_digits(&mut buf[17..19], t.second());
    put_digits(&mut buf[20..26], micros);
    // Only ASCII digits and separators were written: always valid UTF-8.
    match std::str::from_utf8(&buf) {
        Ok(text) => text.to_owned(),
        Err(_) => at.to_rfc3339_opts(SecondsFormat::Micros, true),
    }
}

fn put_digits(out: &mut [u8], mut value: u32) {
    for slot in out.iter_mut().rev() {
        *slot = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

fn digits(text: &[u8]) -> Option<u32> {
    text.iter().try_fold(0u32, |acc, &b| {
        b.is_ascii_digit().then(|| acc * 10 + u32::from(b - b'0'))
    })
}

/// Parses the exported form; `None` when the text is not exactly what [`format()`] writes.
pub fn parse(text: &str) -> Option<DateTime<Utc>> {
    let b = text.as_bytes();
    if b.len() != 27
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'.'
        || b[26] != b'Z'
    {
        return None;
    }
    let date = NaiveDate::from_ymd_opt(
        digits(&b[0..4])? as i32,
        digits(&b[5..7])?,
        digits(&b[8..10])?,
    )?;
    let time = date.and_hms_micro_opt(
        digits(&b[11..13])?,
        digits(&b[14..16])?,
        digits(&b[17..19])?,
        digits(&b[20..26])?,
    )?;
    Some(time.and_utc())
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
    fn the_fast_form_agrees_with_chrono() {
        for micros in [
            0i64,
            1,
            999_999,
            1_735_689_600_123_456,
            253_402_300_799_999_999,
        ] {
            let at = DateTime::from_timestamp_micros(micros).expect("valid");
            let text = format(at);
            assert_eq!(text, at.to_rfc3339_opts(SecondsFormat::Micros, true));
            assert_eq!(parse(&text), Some(at));
        }
    }

    #[test]
    fn the_stored_value_round_trips_and_sorts_in_time_order() {
        let a = truncate(DateTime::from_timestamp(1_735_689_600, 123_456_789).expect("valid"));
        let b = DateTime::from_timestamp_micros(1_735_689_600_123_457).expect("valid");
        assert_eq!(to_stored(a), 1_735_689_600_123_456);
        assert_eq!(from_stored(to_stored(a)), Some(a));
        assert!(to_stored(a) < to_stored(b));
        assert_eq!(from_stored(i64::MAX), None);
    }

    #[test]
    fn other_forms_are_refused() {
        assert_eq!(parse("2025-13-01T00:00:00.000000Z"), None);
        assert_eq!(parse("2025-01-01T00:00:00.00000aZ"), None);
        assert_eq!(parse("2025-01-01T00:00:00Z"), None);
        assert_eq!(parse("2025-01-01T00:00:00.000000+00:00"), None);
        assert_eq!(parse("2025-01-01T00:00:00.000Z"), None);
        assert_eq!(parse("not a time at all, 27 chars"), None);
    }
}
