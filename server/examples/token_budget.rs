//! An LLM-style endpoint limited by the tokens its answers use, per customer: each call
//! is admitted on an estimate (the prompt's tokens plus a usual answer's), and when the
//! answer is done its true size is reported, charging the difference or giving it back. A customer may go up to 500 tokens into debt, which delays their next call
//! exactly as long as the bucket takes to refill it. Beside the bucket, each customer
//! has a plan: 200 000 tokens per calendar month in Europe/Berlin (the month's true
//! length, its daylight-saving hour included), both limits deciding and both charged.
//! It calls itself to show the figures, then keeps serving:
//!
//! ```text
//! cargo run -p sluicegate-server --example token_budget            # then: curl -i -X POST 'localhost:3001/v1/complete?customer=acme' -d 'hello there'
//! cargo run -p sluicegate-server --example token_budget -- --once  # the demonstration alone
//! ```

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;
use sluicegate_core::memory::KeyedLimiter;
use sluicegate_core::{
    AnyAlgorithm, Calendar, CalendarLimit, CalendarWindow, CalendarZone, Composite, TokenBucket,
    ZonedCalendar, SECOND,
};

/// The tokens of a usual answer, counted in every estimate.
const USUAL_ANSWER: u64 = 100;

/// Tokens per customer: a bucket of 1 000, refilled at 1 000 a minute, up to 500 owed,
/// and the month's plan; a composite admits when both do and charges both.
type Budget = KeyedLimiter<String, AnyAlgorithm>;

#[derive(Deserialize)]
struct Customer {
    customer: String,
}

/// A stand-in for the model: an answer of a length only known once generated.
fn generate(prompt: &str) -> String {
    let words = prompt.split_whitespace().count();
    "token ".repeat((words * 97 + 11) % 400)
}

fn tokens(text: &str) -> u64 {
    u64::try_from(text.split_whitespace().count()).unwrap_or(u64::MAX)
}

async fn complete(
    State(budget): State<Arc<Budget>>,
    Query(Customer { customer }): Query<Customer>,
    prompt: String,
) -> Response {
    let estimate = tokens(&prompt) + USUAL_ANSWER;
    let decision = budget.check(&customer, estimate);
    if !decision.allowed {
        let wait = decision.retry_after.map_or(60, |t| t.div_ceil(SECOND));
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from(wait));
        return (
            StatusCode::TOO_MANY_REQUESTS,
            headers,
            "token budget spent\n",
        )
            .into_response();
    }
    let answer = generate(&prompt);
    let used = tokens(&prompt) + tokens(&answer);
    // Settled once the answer is done: more than the estimate may go into debt (up to
    // the overdraft), less gives the rest back.
    let settle = i64::try_from(used).unwrap_or(i64::MAX) - i64::try_from(estimate).unwrap_or(0);
    let reported = budget.report(&customer, settle);
    Json(serde_json::json!({
        "answer_tokens": tokens(&answer),
        "charged": used,
        "remaining": reported.decision.remaining,
    }))
    .into_response()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let bucket = TokenBucket::new(1_000, 1_000, 60 * SECOND)?.with_overdraft(500)?;
    let month = ZonedCalendar::new(Calendar::Month, CalendarZone::named("Europe/Berlin")?)?;
    let plan = CalendarLimit::new(
        CalendarWindow::new(200_000)?.with_overdraft(500)?,
        Arc::new(month),
    );
    let both = Composite::new(vec![
        AnyAlgorithm::TokenBucket(bucket),
        AnyAlgorithm::CalendarWindow(plan),
    ])?;
    let budget = Arc::new(Budget::new(AnyAlgorithm::Composite(both), 100_000));
    let app = Router::new()
        .route("/v1/complete", post(complete))
        .with_state(budget);
    let listener = match tokio::net::TcpListener::bind("127.0.0.1:3001").await {
        Ok(listener) => listener,
        // Port 3001 taken: any free one.
        Err(_) => tokio::net::TcpListener::bind("127.0.0.1:0").await?,
    };
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    println!("serving on http://{addr}");

    let client = Client::builder(TokioExecutor::new()).build_http::<String>();
    for prompt in ["summarize this", "a longer prompt of seven words here"]
        .into_iter()
        .cycle()
        .take(6)
    {
        let request = axum::http::Request::post(format!("http://{addr}/v1/complete?customer=acme"))
            .body(prompt.to_owned())?;
        let response = client.request(request).await?;
        let status = response.status();
        let wait = response.headers().get("retry-after").cloned();
        let body = response.into_body().collect().await?.to_bytes();
        let wait = wait.map(|w| format!(" (retry after {}s)", w.to_str().unwrap_or("?")));
        let body = String::from_utf8_lossy(&body);
        println!("{status} {}{}", body.trim(), wait.unwrap_or_default());
    }
    if std::env::args().any(|a| a == "--once") {
        server.abort();
        return Ok(());
    }
    Ok(server.await??)
}
