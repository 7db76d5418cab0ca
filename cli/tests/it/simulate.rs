//! `sluicegate simulate`: the summary, the chart, the size limits and the progress bar.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{
    assert_contains, assert_exit, bin, bucket, examples, run_line, sluicegate, stderr, stdout,
    with, BUCKET,
};

#[test]
fn simulate_prints_a_summary_and_a_valid_chart() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("chart.svg");
    let out = run_line(&format!(
        "simulate --config {} --policy api --app web --traffic \
         steady:rate=20,keys=1 --duration 10s --chart {}",
        examples(),
        chart.display()
    ));
    assert_exit(&out, 0);
    let summary = stdout(&out);
    // 10 at once, then 5 per second for the rest of the 10 s; the summary aligned.
    for row in [
        "offered                                 200 over 10 s\n",
        "admitted                                59 (29.5%)\n",
        "denied                                  141 (70.5%)\n",
        "most units acting in any 1 s, one key   14\n",
        "most units acting in any 1 s, all keys  14\n",
        "delay p50 / p90 / p99 / max             0 s / 0 s / 0 s / 0 s\n",
    ] {
        assert!(summary.contains(row), "{row}{summary}");
    }
    let svg = std::fs::read_to_string(&chart).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("the chart is well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    assert_eq!(
        root.tag_name().namespace(),
        Some("http://www.w3.org/2000/svg")
    );
    let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
    // Round ticks in one unit, axis labels, a legend naming the limit.
    for label in [
        "admitted",
        "denied",
        "sustained rate: 5 per 1 s",
        "time",
        "requests per 1 s",
        "0",
        "2 s",
        "10 s",
        "5",
        "20",
    ] {
        assert!(texts.contains(&label), "missing {label}: {texts:?}");
    }
    let class = |name: &str| {
        doc.descendants()
            .filter(|n| n.attribute("class") == Some(name))
            .collect::<Vec<_>>()
    };
    assert_eq!(class("axis").len(), 2);
    assert_eq!(class("limit").len(), 1);
    // Gridlines: y at 0, 5, 10, 15, 20; x every 2 s.
    assert_eq!(class("grid").len(), 5 + 6);
    // Bins of one period: ten of them, each admitting what the bucket refills.
    let heights = |name: &str| -> Vec<f64> {
        class(name)
            .iter()
            .map(|n| n.attribute("height").unwrap().parse().unwrap())
            .collect()
    };
    let admitted = heights("admitted");
    assert_eq!(admitted.len(), 10);
    assert!(
        admitted[1..].iter().all(|&h| h == admitted[1]),
        "{admitted:?}"
    );
    assert!(admitted[0] > admitted[1]);
    // Denied is hatched, not a second flat colour.
    assert!(class("denied")
        .iter()
        .all(|n| n.attribute("fill") == Some("url(#hatch)")));
}

#[test]
fn steady_traffic_fills_every_bin_alike_on_any_run_length() {
    let dir = tempfile::tempdir().unwrap();
    for (duration, bins, tick) in [("10s", 10, "4 s"), ("2d", 96, "24 h")] {
        let chart = dir.path().join(format!("{duration}.svg"));
        let out = run_line(&format!(
            "simulate --algorithm fixed-window --limit 10 --period 1s --traffic \
             steady:rate=20 --duration {duration} --chart {}",
            chart.display()
        ));
        assert_exit(&out, 0);
        let svg = std::fs::read_to_string(&chart).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let admitted: Vec<&str> = doc
            .descendants()
            .filter(|n| n.attribute("class") == Some("admitted"))
            .map(|n| n.attribute("height").unwrap())
            .collect();
        assert_eq!(admitted.len(), bins, "{duration}");
        assert!(
            admitted.iter().all(|&h| h == admitted[0]),
            "{duration}: {admitted:?}"
        );
        let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
        assert!(texts.contains(&tick), "{duration}: {texts:?}");
        assert!(texts.contains(&"limit: 10 per 1 s"), "{duration}");
    }
}

#[test]
fn simulations_too_large_or_empty_are_refused_at_once() {
    for (traffic, duration, wanted) in [
        (
            "steady:rate=1",
            "300000d",
            "offers about 25920000000 requests",
        ),
        ("steady:rate=1000000000", "1000d", "offers about"),
        (
            "burst:size=18446744073709551615,every=1us",
            "1s",
            "offers about",
        ),
        ("burst:size=2,every=1us", "18446744073709ms", "offers about"),
        ("poisson:rate=1000000000,seed=1", "1h", "offers about"),
        ("steady:rate=1", "0s", "--duration must be more than 0"),
    ] {
        let start = Instant::now();
        let out = bucket(&["simulate", "--traffic", traffic, "--duration", duration]);
        assert!(start.elapsed() < Duration::from_secs(5), "{traffic}");
        assert_eq!(out.status.code(), Some(2), "{traffic}: {}", stderr(&out));
        assert!(stderr(&out).contains(wanted), "{traffic}: {}", stderr(&out));
        if wanted.starts_with("offers") {
            assert_contains(&stderr(&out), "shorten --duration");
        }
    }
    // Huge bursts and periods within the cap: exact figures, no overflow.
    let out = run_line(
        "simulate --algorithm fixed-window --limit 1000000000 --period 366d \
         --traffic burst:size=1000,every=366d,cost=1000000000 --duration 732d",
    );
    assert_exit(&out, 0);
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l.split_whitespace().eq(["admitted", "2", "(0.1%)"])),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_long_simulation_shows_progress_on_a_terminal_only() {
    let args = with(
        &[
            "simulate",
            "--traffic",
            "steady:rate=100000",
            "--duration",
            "20s",
        ],
        &BUCKET,
    );
    let quoted: Vec<String> = std::iter::once(env!("CARGO_BIN_EXE_sluicegate").to_owned())
        .chain(args.iter().cloned())
        .collect();
    // `script` gives the command a terminal; its output is what the terminal showed.
    let out = Command::new("script")
        .args(["-qec", &quoted.join(" "), "/dev/null"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("50% simulated"), "{shown}");
    assert!(shown.contains("offered"), "{shown}");
    let piped = sluicegate(&args);
    assert!(!stderr(&piped).contains("simulated"));
}

#[test]
fn the_readme_shows_what_its_first_command_prints() {
    let dir = tempfile::tempdir().unwrap();
    let out = bin()
        .current_dir(dir.path())
        .args([
            "simulate",
            "--config",
            &examples(),
            "--policy",
            "api",
            "--app",
            "web",
            "--traffic",
            "steady:rate=20",
            "--duration",
            "10s",
            "--chart",
            "api.svg",
        ])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let shown = readme
        .split("```text\n")
        .nth(1)
        .and_then(|block| block.split("```").next())
        .unwrap();
    assert_eq!(stdout(&out), shown);
    assert!(readme.contains(
        "cargo run -p sluicegate --no-default-features -- simulate --config examples/policies.toml --policy api --app web --traffic steady:rate=20 --duration 10s --chart api.svg"
    ));
}

#[test]
fn a_limit_far_above_the_traffic_does_not_flatten_the_bars() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("c.svg");
    let out = run_line(&format!(
        "simulate --algorithm fixed-window --limit 1000000 --period 1s --traffic \
         steady:rate=10 --duration 10s --chart {}",
        chart.display()
    ));
    assert_exit(&out, 0);
    let svg = std::fs::read_to_string(&chart).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    assert!(!doc
        .descendants()
        .any(|n| n.attribute("class") == Some("limit")));
    let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
    assert!(texts.contains(&"limit: 1000000 per 1 s (above the plot)"));
    // The bars reach the top tick: the axis is scaled to them.
    assert!(texts.contains(&"10"), "{texts:?}");
}

/// The simulated clock starts at the epoch, where the week (from Monday 29 December
/// 1969) and Tokyo's day (from 15:00 UTC) began before 1970: they end on time and the
/// next period admits its limit again, never one period held for the whole run.
#[test]
fn calendar_windows_reset_from_the_first_period_of_a_simulation() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("calendar.toml");
    std::fs::write(
        &config,
        "[policies.weekly]\nalgorithm = \"calendar-window\"\nlimit = 10\ncalendar = \"week\"\n\n\
         [policies.tokyo]\nalgorithm = \"calendar-window\"\nlimit = 5\ncalendar = \"day\"\ntime-zone = \"Asia/Tokyo\"\n",
    )
    .unwrap();
    // Weeks from Thursday 1 January 1970: 4 days, 7 days, and 3 days of the next.
    // Tokyo: days from 15:00 and 39:00 UTC, then the third from 63:00 reached at 42:00.
    // The summary names the calendar, and measures its usual length (not the 25-hour day
    // or 169-hour week a state is kept for).
    for (policy, traffic, duration, admitted, words) in [
        (
            "weekly",
            "burst:size=5,every=1d",
            "14d",
            "30 (42.9%)",
            ["10 per calendar week", "most units acting in any 7 days"],
        ),
        (
            "tokyo",
            "burst:size=5,every=6h",
            "2d",
            "15 (37.5%)",
            ["5 per calendar day", "most units acting in any 1 day"],
        ),
    ] {
        let out = sluicegate([
            "simulate",
            "--config",
            config.to_str().unwrap(),
            "--policy",
            policy,
            "--traffic",
            traffic,
            "--duration",
            duration,
        ]);
        assert_exit(&out, 0);
        let summary = stdout(&out);
        let line = summary.lines().find(|l| l.starts_with("admitted"));
        assert!(line.is_some_and(|l| l.ends_with(admitted)), "{summary}");
        for words in words {
            assert_contains(&summary, words);
        }
    }
}
