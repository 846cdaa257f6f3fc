//! Where a measurement's CPU went: the whole machine's busy time (`/proc/stat`) and one proxy
//! process's own (`/proc/<pid>/stat`), read before and after it. On two cores shared by client,
//! proxy and origin, a scenario that keeps the machine busy is bounded by CPU, not by any one
//! program's latency, and these figures give the most any relay could reach there: the rate the
//! machine would carry if the proxy's own share of the work were gone, and — a bound for what
//! changing the proxy's code could win — if only its user-space share were gone.

/// Clock ticks per second of `/proc`'s counters (`getconf CLK_TCK`; 100 on Linux for x86 and arm).
const TICKS_PER_SECOND: f64 = 100.0;

/// The machine is taken as bounded by CPU from this share of its cores busy (the rest is the
/// odd idle moment between a finished request and the next, not a client waiting on latency).
const SATURATED: f64 = 0.85;

/// A reading of the counters at one instant.
#[derive(Clone, Copy, Debug)]
pub struct Reading {
    machine_busy: u64,
    machine_total: u64,
    proxy: u64,
    proxy_user: u64,
}

/// CPU spent over one measurement, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Spent {
    /// Every core's busy time (user, system, interrupts), all processes together.
    pub machine_busy: f64,
    /// Every core's time, busy or idle.
    pub machine_total: f64,
    /// The proxy process's own user and system time (0 for direct).
    pub proxy: f64,
    /// The part of `proxy` spent in user space: its own code and its libraries', not the
    /// kernel's work on its sockets.
    pub proxy_user: f64,
}

impl Spent {
    pub fn add(&mut self, other: Spent) {
        self.machine_busy += other.machine_busy;
        self.machine_total += other.machine_total;
        self.proxy += other.proxy;
        self.proxy_user += other.proxy_user;
    }

    /// The share of the machine's cores that were busy.
    pub fn busy_share(&self) -> f64 {
        self.machine_busy / self.machine_total.max(f64::MIN_POSITIVE)
    }

    /// Microseconds of the machine's CPU (everything) and of the proxy's per request.
    pub fn per_request_us(&self, requests: u64) -> (f64, f64) {
        let requests = requests.max(1) as f64;
        (
            self.machine_busy * 1e6 / requests,
            self.proxy * 1e6 / requests,
        )
    }

    /// Microseconds of the proxy's user-space CPU per request.
    pub fn user_per_request_us(&self, requests: u64) -> f64 {
        self.proxy_user * 1e6 / requests.max(1) as f64
    }

    /// The requests per second the same machine would carry, as busy as it was, if the proxy
    /// cost nothing: `rate × all / (all − proxy)`. `None` when the machine was not bounded by CPU
    /// (then latency, not work, set the rate, and removing work says nothing about it). This is
    /// an upper bound for any relay in the proxy's place: whatever runs in the proxy's context
    /// for the client's and origin's sockets (their TCP receive on loopback, say) is counted as
    /// the proxy's and taken away too.
    pub fn rate_without_proxy(&self, rate: f64) -> Option<f64> {
        self.rate_without(self.proxy, rate)
    }

    /// As [`Spent::rate_without_proxy`], taking away only the proxy's user-space time: the most
    /// that making the proxy's own code (parsing, deciding, logging, its allocator, its runtime)
    /// free could win, the kernel's work on its sockets left where it is.
    pub fn rate_without_proxy_code(&self, rate: f64) -> Option<f64> {
        self.rate_without(self.proxy_user, rate)
    }

    fn rate_without(&self, removed: f64, rate: f64) -> Option<f64> {
        if self.busy_share() < SATURATED || removed >= self.machine_busy {
            return None;
        }
        Some(rate * self.machine_busy / (self.machine_busy - removed))
    }
}

/// Reads the counters now; `proxy` is the proxy's process id (none for direct).
pub fn read(proxy: Option<u32>) -> std::io::Result<Reading> {
    let (machine_busy, machine_total) = machine(&std::fs::read_to_string("/proc/stat")?)?;
    let (proxy_user, proxy_system) = match proxy {
        Some(pid) => process(&std::fs::read_to_string(format!("/proc/{pid}/stat"))?)?,
        None => (0, 0),
    };
    Ok(Reading {
        machine_busy,
        machine_total,
        proxy: proxy_user + proxy_system,
        proxy_user,
    })
}

/// What was spent between two readings.
pub fn between(before: Reading, after: Reading) -> Spent {
    let seconds = |after: u64, before: u64| after.saturating_sub(before) as f64 / TICKS_PER_SECOND;
    Spent {
        machine_busy: seconds(after.machine_busy, before.machine_busy),
        machine_total: seconds(after.machine_total, before.machine_total),
        proxy: seconds(after.proxy, before.proxy),
        proxy_user: seconds(after.proxy_user, before.proxy_user),
    }
}

/// Busy and total ticks from `/proc/stat`'s first line: `cpu user nice system idle iowait irq
/// softirq steal …`. Idle and iowait are not busy; steal (the hypervisor running someone else)
/// is neither busy here nor ours, so it counts in neither.
fn machine(stat: &str) -> std::io::Result<(u64, u64)> {
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .filter(|line| line.starts_with("cpu "))
        .map(|line| {
            line.split_whitespace()
                .skip(1)
                .filter_map(|f| f.parse().ok())
                .collect()
        })
        .filter(|fields: &Vec<u64>| fields.len() >= 7)
        .ok_or_else(|| std::io::Error::other("/proc/stat has no cpu line"))?;
    let (user, nice, system, idle, iowait, irq, softirq) = (
        fields[0], fields[1], fields[2], fields[3], fields[4], fields[5], fields[6],
    );
    let busy = user + nice + system + irq + softirq;
    Ok((busy, busy + idle + iowait))
}

/// User and system ticks from `/proc/<pid>/stat` (fields 14 and 15, counted after the command
/// name, which may itself hold spaces and parentheses).
fn process(stat: &str) -> std::io::Result<(u64, u64)> {
    let after_name = stat
        .rfind(')')
        .map(|end| &stat[end + 1..])
        .ok_or_else(|| std::io::Error::other("unreadable /proc/<pid>/stat"))?;
    // After the name: state is field 3, so utime (14) and stime (15) are the 12th and 13th.
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    match (tick(11), tick(12)) {
        (Some(user), Some(system)) => Ok((user, system)),
        _ => Err(std::io::Error::other("unreadable /proc/<pid>/stat")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_busy_leaves_out_idle_iowait_and_steal() {
        let stat = "cpu  100 5 50 1000 20 3 7 400 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        assert_eq!(machine(stat).unwrap(), (165, 1185));
        assert!(machine("intr 1 2 3\n").is_err());
    }

    #[test]
    fn process_time_is_read_past_a_name_with_spaces() {
        let stat = "4242 (squid (1) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 31 17 0 0 20 0 1 0";
        assert_eq!(process(stat).unwrap(), (31, 17));
        assert!(process("4242 squid S").is_err());
    }

    #[test]
    fn the_bound_is_given_only_where_the_machine_was_busy() {
        let saturated = Spent {
            machine_busy: 3.8,
            machine_total: 4.0,
            proxy: 1.9,
            proxy_user: 0.38,
        };
        // Half the work was the proxy's: without it, twice the rate.
        assert_eq!(saturated.rate_without_proxy(1000.0), Some(2000.0));
        // A tenth was the proxy's own code: without that, a ninth more.
        let without_code = saturated.rate_without_proxy_code(900.0).unwrap();
        assert!((without_code - 1000.0).abs() < 1e-9, "{without_code}");
        assert_eq!(saturated.per_request_us(1000), (3800.0, 1900.0));
        assert_eq!(saturated.user_per_request_us(1000), 380.0);
        let waiting = Spent {
            machine_busy: 2.0,
            ..saturated
        };
        assert_eq!(waiting.rate_without_proxy(1000.0), None);
        assert_eq!(waiting.rate_without_proxy_code(1000.0), None);
    }

    #[test]
    fn spending_adds_up_over_rounds() {
        let mut total = Spent::default();
        let before = Reading {
            machine_busy: 100,
            machine_total: 200,
            proxy: 10,
            proxy_user: 2,
        };
        let after = Reading {
            machine_busy: 290,
            machine_total: 400,
            proxy: 60,
            proxy_user: 12,
        };
        total.add(between(before, after));
        total.add(between(before, after));
        assert!((total.machine_busy - 3.8).abs() < 1e-9);
        assert!((total.machine_total - 4.0).abs() < 1e-9);
        assert!((total.proxy - 1.0).abs() < 1e-9);
        assert!((total.proxy_user - 0.2).abs() < 1e-9);
        // A counter that went backwards (a pid reused) counts as nothing, not as a huge number.
        assert_eq!(between(after, before), Spent::default());
    }
}
