//! The [`clock`](super::clock) tool's work: UTC offsets, and civil dates computed from Unix
//! time without a date library.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::error::ToolError;

/// The widest offsets in use anywhere (UTC-12:00 to UTC+14:00), in minutes.
const MIN_OFFSET: i32 = -12 * 60;
const MAX_OFFSET: i32 = 14 * 60;

const SECONDS_PER_DAY: i64 = 86_400;

const WEEKDAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// What the clock tool returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct ClockReading {
    /// RFC 3339 in UTC, to the second.
    pub(super) utc: String,
    /// Whole seconds since 1970-01-01T00:00:00Z (rounded down).
    pub(super) unix: i64,
    /// RFC 3339 at the requested offset, when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) local: Option<String>,
    /// The English weekday of `local` if given, else of `utc`.
    pub(super) weekday: &'static str,
}

/// Reads the clock at `now`, with `local` at `utc_offset` when one is given (an empty string
/// counts as none). Taking `now` as an argument makes the tool testable.
pub(super) fn clock_at(
    now: SystemTime,
    utc_offset: Option<&str>,
) -> Result<ClockReading, ToolError> {
    let offset = match utc_offset.map(str::trim) {
        None | Some("") => None,
        Some(raw) => Some(parse_offset(raw).ok_or_else(|| {
            ToolError::respond_to_model(format!(
                "`{raw}` is not a UTC offset; use the form `+02:00`, `-05:30` or `Z`, between -12:00 and +14:00"
            ))
        })?),
    };
    let unix = unix_seconds(now);
    let local_seconds = unix.saturating_add(i64::from(offset.unwrap_or(0)) * 60);
    Ok(ClockReading {
        utc: format_rfc3339(unix, None),
        unix,
        local: offset.map(|minutes| format_rfc3339(local_seconds, Some(minutes))),
        weekday: weekday(local_seconds.div_euclid(SECONDS_PER_DAY)),
    })
}

/// Whole seconds since the Unix epoch, rounded down (so 0.5 s before it is -1).
fn unix_seconds(now: SystemTime) -> i64 {
    match now.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
        Err(before) => {
            let before = before.duration();
            let whole = i64::try_from(before.as_secs()).unwrap_or(i64::MAX);
            let partial = i64::from(before.subsec_nanos() > 0);
            -whole.saturating_add(partial)
        }
    }
}

/// Parses `Z`, `UTC`, `+HH:MM`, `+HHMM` or `+HH` (either sign) into minutes east of UTC.
/// `None` when the text is none of these or the offset is outside -12:00..=+14:00.
pub(super) fn parse_offset(raw: &str) -> Option<i32> {
    if raw.eq_ignore_ascii_case("z") || raw.eq_ignore_ascii_case("utc") {
        return Some(0);
    }
    // Bytes, not `str` slices: a multi-byte character must not make a slice panic.
    let (sign, rest) = match raw.as_bytes() {
        [b'+', rest @ ..] => (1, rest),
        [b'-', rest @ ..] => (-1, rest),
        _ => return None,
    };
    let two_digits = |pair: &[u8]| -> Option<i32> {
        match pair {
            [a @ b'0'..=b'9', b @ b'0'..=b'9'] => {
                Some(i32::from(a - b'0') * 10 + i32::from(b - b'0'))
            }
            _ => None,
        }
    };
    let (hours, minutes) = match rest {
        [h1, h2] => (two_digits(&[*h1, *h2])?, 0),
        [h1, h2, m1, m2] | [h1, h2, b':', m1, m2] => {
            (two_digits(&[*h1, *h2])?, two_digits(&[*m1, *m2])?)
        }
        _ => return None,
    };
    if minutes >= 60 {
        return None;
    }
    let total = sign * (hours * 60 + minutes);
    (MIN_OFFSET..=MAX_OFFSET).contains(&total).then_some(total)
}

/// A calendar date in the proleptic Gregorian calendar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Date {
    year: i64,
    month: u32,
    day: u32,
}

/// The date `days` days after 1970-01-01 (negative: before it).
///
/// Works in 400-year eras (146,097 days each, after which the calendar repeats) of years that
/// start on March 1st, which puts the leap day last so month lengths follow a fixed pattern.
fn date_from_days(days: i64) -> Date {
    // 0000-03-01 is 719,468 days before 1970-01-01.
    let from_march_0000 = days + 719_468;
    let era = from_march_0000.div_euclid(146_097);
    let day_of_era = from_march_0000.rem_euclid(146_097); // 0..=146_096
    // Every 4th year is 366 days long except every 100th, except every 400th; the three
    // corrections turn a day of the era into a year of the era.
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365; // 0..=399
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100); // 0..=365
    // Months from March have 31 30 31 30 31 31 30 31 30 31 31 (29|28) days: a linear rule
    // with 153 days per 5 months finds the month and its first day.
    let month_from_march = (5 * day_of_year + 2) / 153; // 0..=11
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = era * 400 + year_of_era + i64::from(month <= 2);
    Date {
        year,
        // Both are in small ranges by construction (1..=12 and 1..=31).
        month: u32::try_from(month).unwrap_or(1),
        day: u32::try_from(day).unwrap_or(1),
    }
}

/// Days from 1970-01-01 to `date`: the inverse of [`date_from_days`].
#[cfg(test)]
fn days_from_date(date: Date) -> i64 {
    let month = i64::from(date.month);
    let year = date.year - i64::from(month <= 2);
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(date.day) - 1;
    let day_of_era = 365 * year_of_era + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

fn weekday(days: i64) -> &'static str {
    // 1970-01-01 was a Thursday.
    let index = (days + 4).rem_euclid(7);
    WEEKDAYS[usize::try_from(index).unwrap_or(0)]
}

/// `seconds` (already shifted to local time) as RFC 3339: `Z` without an offset, `±HH:MM`
/// with one.
fn format_rfc3339(seconds: i64, offset_minutes: Option<i32>) -> String {
    let date = date_from_days(seconds.div_euclid(SECONDS_PER_DAY));
    let of_day = seconds.rem_euclid(SECONDS_PER_DAY);
    let (hour, minute, second) = (of_day / 3600, of_day % 3600 / 60, of_day % 60);
    let zone = match offset_minutes {
        None => "Z".to_owned(),
        Some(minutes) => {
            let sign = if minutes < 0 { '-' } else { '+' };
            let minutes = minutes.unsigned_abs();
            format!("{sign}{:02}:{:02}", minutes / 60, minutes % 60)
        }
    };
    format!(
        "{:04}-{:02}-{:02}T{hour:02}:{minute:02}:{second:02}{zone}",
        date.year, date.month, date.day
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Duration;

    use super::*;

    fn at(unix: i64) -> SystemTime {
        if unix >= 0 {
            UNIX_EPOCH + Duration::from_secs(unix.unsigned_abs())
        } else {
            UNIX_EPOCH - Duration::from_secs(unix.unsigned_abs())
        }
    }

    fn date(year: i64, month: u32, day: u32) -> Date {
        Date { year, month, day }
    }

    #[test]
    fn known_dates() {
        for (days, expected, weekday_name) in [
            (0, date(1970, 1, 1), "Thursday"),
            (-1, date(1969, 12, 31), "Wednesday"),
            (11_016, date(2000, 2, 29), "Tuesday"),
            (20_779, date(2026, 11, 22), "Sunday"),
            (47_541, date(2100, 3, 1), "Monday"),
            (-25_508, date(1900, 3, 1), "Thursday"),
        ] {
            assert_eq!(date_from_days(days), expected, "day {days}");
            assert_eq!(days_from_date(expected), days, "{expected:?}");
            assert_eq!(weekday(days), weekday_name, "day {days}");
        }
        // 2100 is not a leap year: February 28th is followed by March 1st.
        assert_eq!(date_from_days(47_540), date(2100, 2, 28));
        // 2000 is one (divisible by 400).
        assert_eq!(date_from_days(11_017), date(2000, 3, 1));
    }

    #[test]
    fn conversion_round_trips_over_centuries() {
        let mut previous = date_from_days(-800_000);
        for days in -799_999..800_000 {
            let current = date_from_days(days);
            assert_eq!(days_from_date(current), days);
            // Consecutive days: the next day of the month, or the 1st of the next month.
            let next_day = current.year == previous.year
                && current.month == previous.month
                && current.day == previous.day + 1;
            let next_month = current.day == 1
                && ((current.year == previous.year && current.month == previous.month + 1)
                    || (current.year == previous.year + 1
                        && current.month == 1
                        && previous.month == 12));
            assert!(next_day || next_month, "{previous:?} -> {current:?}");
            previous = current;
        }
    }

    #[test]
    fn reading_in_utc() {
        let reading = clock_at(at(1_795_342_503), None).unwrap();
        assert_eq!(
            reading,
            ClockReading {
                utc: "2026-11-22T10:15:03Z".into(),
                unix: 1_795_342_503,
                local: None,
                weekday: "Sunday",
            }
        );
        let json = serde_json::to_value(&reading).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"utc": "2026-11-22T10:15:03Z", "unix": 1_795_342_503_i64, "weekday": "Sunday"})
        );
        assert_eq!(clock_at(at(0), None).unwrap().utc, "1970-01-01T00:00:00Z");
        assert_eq!(
            clock_at(at(951_827_696), Some("")).unwrap().utc,
            "2000-02-29T12:34:56Z"
        );
        assert_eq!(
            clock_at(at(4_107_542_400), None).unwrap().utc,
            "2100-03-01T00:00:00Z"
        );
    }

    #[test]
    fn reading_at_an_offset() {
        let reading = clock_at(at(1_795_342_503), Some("+02:00")).unwrap();
        assert_eq!(reading.local.as_deref(), Some("2026-11-22T12:15:03+02:00"));
        assert_eq!(reading.utc, "2026-11-22T10:15:03Z");
        assert_eq!(reading.weekday, "Sunday");

        // A negative offset crossing midnight back into the previous day, month and year.
        let reading = clock_at(at(1_767_232_800), Some("-05:30")).unwrap();
        assert_eq!(reading.utc, "2026-01-01T02:00:00Z");
        assert_eq!(reading.local.as_deref(), Some("2025-12-31T20:30:00-05:30"));
        assert_eq!(reading.weekday, "Wednesday");

        // A positive one crossing into the next year.
        let reading = clock_at(at(1_735_687_800), Some("+14:00")).unwrap();
        assert_eq!(reading.local.as_deref(), Some("2025-01-01T13:30:00+14:00"));
        assert_eq!(reading.weekday, "Wednesday");

        let reading = clock_at(at(0), Some("Z")).unwrap();
        assert_eq!(reading.local.as_deref(), Some("1970-01-01T00:00:00+00:00"));
    }

    #[test]
    fn before_the_epoch() {
        let reading = clock_at(at(-1), None).unwrap();
        assert_eq!(reading.unix, -1);
        assert_eq!(reading.utc, "1969-12-31T23:59:59Z");
        assert_eq!(reading.weekday, "Wednesday");
        // Half a second before the epoch rounds down to -1, like the instant it belongs to.
        assert_eq!(unix_seconds(UNIX_EPOCH - Duration::from_millis(500)), -1);
        assert_eq!(unix_seconds(UNIX_EPOCH + Duration::from_millis(500)), 0);
        assert_eq!(
            clock_at(at(-2_203_891_200), None).unwrap().utc,
            "1900-03-01T00:00:00Z"
        );
    }

    #[test]
    fn offsets() {
        assert_eq!(parse_offset("Z"), Some(0));
        assert_eq!(parse_offset("z"), Some(0));
        assert_eq!(parse_offset("UTC"), Some(0));
        assert_eq!(parse_offset("+02:00"), Some(120));
        assert_eq!(parse_offset("-05:30"), Some(-330));
        assert_eq!(parse_offset("+0545"), Some(345));
        assert_eq!(parse_offset("-03"), Some(-180));
        assert_eq!(parse_offset("+14:00"), Some(840));
        assert_eq!(parse_offset("-12:00"), Some(-720));
        for invalid in [
            "+25:00",
            "+14:01",
            "-12:30",
            "+02:60",
            "abc",
            "",
            "+",
            "2:00",
            "02:00",
            "+2:00",
            "+02:0",
            "+02-00",
            "+02:00:00",
            "+٠٢:٠٠",
            "+a٠b",
            "+٠٢",
            "GMT+2",
        ] {
            assert_eq!(parse_offset(invalid), None, "{invalid}");
        }
    }

    #[test]
    fn invalid_offsets_go_back_to_the_model() {
        for invalid in ["+25:00", "abc"] {
            let error = clock_at(at(0), Some(invalid)).unwrap_err();
            assert!(!error.is_fatal());
            assert_eq!(
                error.message(),
                format!(
                    "`{invalid}` is not a UTC offset; use the form `+02:00`, `-05:30` or `Z`, between -12:00 and +14:00"
                )
            );
        }
    }
}
