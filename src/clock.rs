//! The time of day in UTC, for run names and the date a run ended (no time-zone data needed).

use serde::Serialize;

/// A moment in UTC, to the second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UtcTime {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

impl UtcTime {
    /// Now, by the system clock (the epoch if the clock is set before it).
    pub fn now() -> UtcTime {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        UtcTime::from_unix(secs)
    }

    /// The moment `secs` seconds after 1970-01-01 00:00:00 UTC.
    pub fn from_unix(secs: u64) -> UtcTime {
        let (days, rem) = (secs / 86_400, secs % 86_400);
        // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
        let z = days as i64 + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        UtcTime {
            year: yoe + era * 400 + i64::from(month <= 2),
            month: month as u32,
            day: day as u32,
            hour: (rem / 3600) as u32,
            minute: (rem % 3600 / 60) as u32,
            second: (rem % 60) as u32,
        }
    }

    /// `20261129-130501`, for names of files and directories.
    pub fn compact(&self) -> String {
        format!(
            "{:04}{:02}{:02}-{:02}{:02}{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

impl std::fmt::Display for UtcTime {
    /// `2026-11-29 13:05:01 UTC`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

#[cfg(test)]
mod tests {
    use super::UtcTime;

    #[test]
    fn known_moments_are_dated_as_calendars_date_them() {
        // `date -u -d @…` gives these.
        assert_eq!(UtcTime::from_unix(0).to_string(), "1970-01-01 00:00:00 UTC");
        assert_eq!(UtcTime::from_unix(951_825_600).compact(), "20000229-120000");
        assert_eq!(
            UtcTime::from_unix(1_796_319_692).to_string(),
            "2026-12-03 17:41:32 UTC"
        );
    }
}
