//! Reported costs and calendar windows in policies: `overdraft` on every algorithm that
//! takes reports, `algorithm = "calendar-window"` with its `calendar` and `time-zone`,
//! built exactly as the core's, and every mistake named with its place in the file.

use std::sync::Arc;

use sluicegate_core::{
    Algorithm, AnyAlgorithm, Calendar, CalendarLimit, CalendarWindow, CalendarZone, FixedWindow,
    Report, TokenBucket, ZonedCalendar,
};
use sluicegate_policy::{Built, Policy, PolicyFile, Style};

fn built(json: &str) -> Result<AnyAlgorithm, String> {
    let policy: Policy = serde_json::from_str(json).map_err(|e| e.to_string())?;
    match policy.build(Style::File) {
        Ok(Built::Rule(rule)) => Ok(rule),
        Ok(other) => Err(format!("{other:?}")),
        Err(problem) => Err(format!("{:?}: {}", problem.field, problem.message)),
    }
}

/// The error of the file holding one policy `p` written as `table`.
fn file_error(table: &str) -> String {
    let text = format!("[policies.p]\n{table}\n");
    PolicyFile::parse_built("p.toml", &text)
        .unwrap_err()
        .to_string()
}

#[test]
fn overdraft_builds_the_core_algorithm_with_it() {
    let window = built(r#"{"algorithm":"fixed-window","limit":3,"period":"1s","overdraft":5}"#);
    let want = FixedWindow::new(3, 1_000_000)
        .unwrap()
        .with_overdraft(5)
        .unwrap();
    assert_eq!(window, Ok(want.into()));
    let bucket =
        built(r#"{"algorithm":"token-bucket","capacity":2,"rate":1,"period":"1s","overdraft":4}"#);
    let want = TokenBucket::new(2, 1, 1_000_000)
        .unwrap()
        .with_overdraft(4)
        .unwrap();
    assert_eq!(bucket.as_ref().map(Report::overdraft), Ok(4));
    assert_eq!(bucket, Ok(want.into()));
    // Default 0, and written only when given.
    let plain: Policy =
        serde_json::from_str(r#"{"algorithm":"sliding-log","limit":3,"period":"1s"}"#).unwrap();
    assert_eq!(
        plain
            .build(Style::File)
            .map(|b| matches!(b, Built::Rule(r) if r.overdraft() == 0)),
        Ok(true)
    );
    assert!(serde_json::to_value(&plain)
        .unwrap()
        .get("overdraft")
        .is_none());
}

#[test]
fn overdraft_is_refused_where_reports_mean_nothing() {
    let pacing =
        built(r#"{"algorithm":"pacing","capacity":2,"rate":1,"period":"1s","overdraft":1}"#);
    assert_eq!(
        pacing,
        Err("Some(\"overdraft\"): pacing takes no `overdraft`".into())
    );
    let banned = built(
        r#"{"algorithm":"fixed-window","limit":3,"period":"1s","overdraft":1,
            "ban":{"threshold":1,"window":"1s","duration":"1s"}}"#,
    );
    assert!(banned.unwrap_err().contains("a ban takes no reports"));
    let members = built(
        r#"{"algorithm":"composite","limits":[
            {"algorithm":"fixed-window","limit":3,"period":"1s","overdraft":2},
            {"algorithm":"token-bucket","capacity":3,"rate":1,"period":"1s"}]}"#,
    );
    assert_eq!(members.map(|c| c.overdraft()), Ok(0));
    let too_much =
        built(r#"{"algorithm":"fixed-window","limit":3,"period":"1s","overdraft":2000000000}"#);
    assert!(too_much.unwrap_err().starts_with("Some(\"overdraft\")"));
}

#[test]
fn a_calendar_window_builds_the_core_limit_in_its_zone() {
    let month = built(
        r#"{"algorithm":"calendar-window","limit":10000,"calendar":"month","time-zone":"Europe/Berlin","overdraft":50}"#,
    )
    .unwrap();
    let zone = CalendarZone::named("Europe/Berlin").unwrap();
    let window = CalendarWindow::new(10_000)
        .unwrap()
        .with_overdraft(50)
        .unwrap();
    let calendar = ZonedCalendar::new(Calendar::Month, zone).unwrap();
    let want = AnyAlgorithm::from(CalendarLimit::new(window, Arc::new(calendar)));
    assert_eq!(month, want);
    // 2026-03-31T21:00Z is 23:00 in Berlin: an hour of March left.
    let now = 1_774_990_800_000_000;
    assert_eq!(month.decide(None, now, 1).0.reset_after, 3_600_000_000);
    // UTC by default; the period a policy reports is the calendar's longest.
    let day: Policy =
        serde_json::from_str(r#"{"algorithm":"calendar-window","limit":5,"calendar":"day"}"#)
            .unwrap();
    let Ok(Built::Rule(AnyAlgorithm::CalendarWindow(limit))) = day.build(Style::File) else {
        panic!("{day:?}");
    };
    assert_eq!(limit.calendar().name(), "day in UTC");
    assert_eq!(day.period(), 25 * 3_600_000_000);
    let written = serde_json::to_value(&day).unwrap();
    assert_eq!(written["calendar"], "day");
    assert!(written.get("time-zone").is_none());
}

#[test]
fn calendar_mistakes_name_their_field_and_place() {
    let year = file_error("algorithm = \"calendar-window\"\nlimit = 5\ncalendar = \"year\"");
    assert_eq!(
        year,
        "p.toml:4:12: policy \"p\": `calendar` is day, week or month, not \"year\""
    );
    let mars = file_error(
        "algorithm = \"calendar-window\"\nlimit = 5\ncalendar = \"day\"\ntime-zone = \"Mars/Base\"",
    );
    assert_eq!(
        mars,
        "p.toml:5:13: policy \"p\": `time-zone`: unknown time zone \"Mars/Base\""
    );
    let missing = file_error("algorithm = \"calendar-window\"\nlimit = 5");
    assert!(
        missing.ends_with("calendar-window needs `calendar`"),
        "{missing}"
    );
    let stray =
        file_error("algorithm = \"fixed-window\"\nlimit = 5\nperiod = \"1s\"\ntime-zone = \"UTC\"");
    assert_eq!(
        stray,
        "p.toml:5:13: policy \"p\": fixed-window takes no `time-zone`"
    );
    let period = file_error(
        "algorithm = \"calendar-window\"\nlimit = 5\ncalendar = \"week\"\nperiod = \"1d\"",
    );
    assert!(
        period.contains("takes `limit` and `calendar`, not `period`"),
        "{period}"
    );
    let overdraft = file_error(
        "algorithm = \"calendar-window\"\nlimit = 5\ncalendar = \"week\"\noverdraft = -1",
    );
    assert!(overdraft.starts_with("p.toml:5:13:"), "{overdraft}");
}
