//! Cron schedules, in the five-field syntax Kubernetes CronJobs accept, plus the `@hourly` family.

use std::fmt;

use serde::Serialize;

/// A valid schedule, kept as written and as the set of times it names.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CronSchedule {
    text: String,
    minutes: u64,
    hours: u32,
    days_of_month: u32,
    months: u16,
    days_of_week: u8,
    /// Cron's rule: when both day fields are restricted, a day matches if EITHER matches.
    day_fields_restricted: (bool, bool),
}

impl CronSchedule {
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the schedule fires at this minute. `day_of_week` is 0 for Sunday.
    pub fn fires_at(
        &self,
        minute: u32,
        hour: u32,
        day_of_month: u32,
        month: u32,
        day_of_week: u32,
    ) -> bool {
        let bit = |set: u64, i: u32| i < 64 && set & (1 << i) != 0;
        let dom = bit(self.days_of_month.into(), day_of_month);
        let dow = bit(self.days_of_week.into(), day_of_week % 7);
        let day = match self.day_fields_restricted {
            (true, true) => dom || dow,
            (true, false) => dom,
            (false, true) => dow,
            (false, false) => true,
        };
        bit(self.minutes, minute)
            && bit(self.hours.into(), hour)
            && bit(self.months.into(), month)
            && day
    }
}

impl fmt::Display for CronSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for CronSchedule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const FIELDS: [Field; 5] = [
    Field {
        name: "minute",
        min: 0,
        max: 59,
        names: &[],
    },
    Field {
        name: "hour",
        min: 0,
        max: 23,
        names: &[],
    },
    Field {
        name: "day of month",
        min: 1,
        max: 31,
        names: &[],
    },
    Field {
        name: "month",
        min: 1,
        max: 12,
        names: &[
            "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
        ],
    },
    // 7 is Sunday too, as in every cron.
    Field {
        name: "day of week",
        min: 0,
        max: 7,
        names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
    },
];

/// Parses a schedule, or says what is wrong with it.
pub fn parse_cron(text: &str) -> Result<CronSchedule, String> {
    let expanded = match text.trim() {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        other if other.starts_with('@') => {
            return Err(format!(
                "{other} is not a known shorthand; use @yearly, @monthly, @weekly, @daily or @hourly"
            ));
        }
        other => other,
    };
    let parts: Vec<&str> = expanded.split_whitespace().collect();
    if parts.len() != 5 {
        return Err(format!(
            "it has {} fields; a schedule has five: minute hour day-of-month month day-of-week",
            parts.len()
        ));
    }
    let mut sets = [0u64; 5];
    for ((set, part), field) in sets.iter_mut().zip(&parts).zip(&FIELDS) {
        *set = parse_field(part, field)?;
    }
    // Day of week 7 is Sunday: fold it onto 0.
    let days_of_week = (sets[4] | (sets[4] >> 7)) & 0x7f;
    let restricted = |part: &str| !(part == "*" || part == "?");
    Ok(CronSchedule {
        text: text.trim().to_string(),
        minutes: sets[0],
        hours: u32::try_from(sets[1]).unwrap_or(u32::MAX),
        days_of_month: u32::try_from(sets[2]).unwrap_or(u32::MAX),
        months: u16::try_from(sets[3]).unwrap_or(u16::MAX),
        days_of_week: u8::try_from(days_of_week).unwrap_or(u8::MAX),
        day_fields_restricted: (restricted(parts[2]), restricted(parts[4])),
    })
}

fn parse_field(part: &str, field: &Field) -> Result<u64, String> {
    let mut set = 0u64;
    for item in part.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => {
                let step: u32 = step.parse().ok().filter(|s| *s > 0).ok_or_else(|| {
                    format!(
                        "the step {step:?} in the {} field is not a positive number",
                        field.name
                    )
                })?;
                (range, step)
            }
            None => (item, 1),
        };
        let (first, last) = if range == "*" || (range == "?" && field.name.starts_with("day")) {
            (field.min, field.max)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a, field)?, value(b, field)?)
        } else {
            let start = value(range, field)?;
            // "5/15" means from 5 to the end in steps of 15.
            (start, if item.contains('/') { field.max } else { start })
        };
        if first > last {
            return Err(format!(
                "the range {range:?} in the {} field runs backwards",
                field.name
            ));
        }
        let mut i = first;
        while i <= last {
            set |= 1 << i;
            i += step;
        }
    }
    Ok(set)
}

fn value(text: &str, field: &Field) -> Result<u32, String> {
    let lower = text.to_ascii_lowercase();
    let named = field
        .names
        .iter()
        .position(|n| *n == lower)
        .and_then(|i| u32::try_from(i).ok())
        .map(|i| i + field.min);
    let number = named
        .or_else(|| text.parse::<u32>().ok())
        .ok_or_else(|| format!("{text:?} in the {} field is not a number", field.name))?;
    if number < field.min || number > field.max {
        return Err(format!(
            "{number} is outside the {} field's range {}-{}",
            field.name, field.min, field.max
        ));
    }
    Ok(number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_usual_forms() {
        for text in [
            "* * * * *",
            "*/5 * * * *",
            "0 3 * * 1-5",
            "0,30 9-17 * * mon-fri",
            "15 2 1 jan *",
            "5/15 * * * *",
            "0 0 ? * 7",
            "@hourly",
            "@daily",
        ] {
            assert!(parse_cron(text).is_ok(), "{text}: {:?}", parse_cron(text));
        }
    }

    #[test]
    fn refuses_with_a_reason() {
        let cases = [
            ("* * * *", "five"),
            ("60 * * * *", "range 0-59"),
            ("* 24 * * *", "range 0-23"),
            ("* * 0 * *", "range 1-31"),
            ("*/0 * * * *", "positive"),
            ("5-1 * * * *", "backwards"),
            ("x * * * *", "not a number"),
            ("@every 5m", "shorthand"),
            ("* * * * 8", "range 0-7"),
        ];
        for (text, reason) in cases {
            let err = parse_cron(text).unwrap_err();
            assert!(err.contains(reason), "{text}: {err}");
        }
    }

    #[test]
    fn fires_when_it_says() {
        let every_five = parse_cron("*/5 * * * *").unwrap();
        assert!(every_five.fires_at(0, 0, 1, 1, 0));
        assert!(every_five.fires_at(55, 23, 31, 12, 6));
        assert!(!every_five.fires_at(3, 0, 1, 1, 0));

        let weekdays = parse_cron("0 9 * * mon-fri").unwrap();
        assert!(weekdays.fires_at(0, 9, 10, 6, 1));
        assert!(!weekdays.fires_at(0, 9, 10, 6, 0));

        let sunday = parse_cron("0 0 * * 7").unwrap();
        assert!(sunday.fires_at(0, 0, 5, 5, 0), "7 is Sunday");

        // Both day fields restricted: either one matching is enough.
        let either = parse_cron("0 0 1 * 1").unwrap();
        assert!(either.fires_at(0, 0, 1, 3, 4));
        assert!(either.fires_at(0, 0, 9, 3, 1));
        assert!(!either.fires_at(0, 0, 9, 3, 2));
    }
}
