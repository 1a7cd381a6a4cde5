//! `merit serve`'s web page in a real browser (issue 21, item 2): headless Chromium driven
//! through chromedriver (Debian's `chromium` and `chromium-driver`) against a `merit serve`
//! process clicks through ask → reject → ask → correct → memory visible → retire, and reads
//! the answer, the attempts, the memories used and the growth plot off the page.

use crate::mcp_tools::{write_config, KEY};
use crate::serve_process::{chat, start, WORDS};
use fantoccini::{ClientBuilder, Locator};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The chromedriver to use: `$MERIT_CHROMEDRIVER`, else `chromedriver` on the PATH; `None`
/// (skipping loudly) when there is none and it is not required.
fn chromedriver() -> Option<String> {
    let named = std::env::var("MERIT_CHROMEDRIVER")
        .ok()
        .filter(|p| !p.is_empty());
    let found = named.or_else(|| {
        Command::new("chromedriver")
            .arg("--version")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|_| "chromedriver".to_string())
    });
    if found.is_none() {
        merit_core::optional::missing(
            "MERIT_REQUIRE_BROWSER",
            "the web page's browser test: no chromedriver",
            "apt-get install chromium chromium-driver",
        );
    }
    found
}

/// Kills chromedriver when the test ends, however it ends.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_chromedriver(program: &str) -> (Driver, String) {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(program)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "chromedriver did not listen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (Driver(child), format!("http://127.0.0.1:{port}"))
}

/// Waits until the element `css` has text containing `wanted`; returns the text.
async fn wait_text(client: &fantoccini::Client, css: &str, wanted: &str) -> String {
    let started = Instant::now();
    loop {
        if let Ok(element) = client.find(Locator::Css(css)).await {
            if let Ok(text) = element.text().await {
                if text.contains(wanted) {
                    return text;
                }
            }
        }
        let error = match client.find(Locator::Css("#error")).await {
            Ok(element) => element.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        assert!(
            error.is_empty(),
            "the page shows an error while waiting for {css}: {error}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{css} never showed {wanted:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn fill(client: &fantoccini::Client, css: &str, text: &str) {
    let input = client.find(Locator::Css(css)).await.unwrap();
    input.clear().await.unwrap();
    input.send_keys(text).await.unwrap();
}

async fn click(client: &fantoccini::Client, css: &str) {
    client
        .find(Locator::Css(css))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

async fn count(client: &fantoccini::Client, css: &str) -> usize {
    client.find_all(Locator::Css(css)).await.unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs headless Chromium: apt-get install chromium chromium-driver; run with --include-ignored, as CI does"]
async fn the_web_page_asks_takes_feedback_and_manages_memory_in_a_real_browser() {
    let Some(program) = chromedriver() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let models = crate::stand_in::serve(chat, &WORDS);
    let (mut server, address) = start(&config, &models, &dir.path().join("cache"));
    let (_driver, webdriver) = start_chromedriver(&program);
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({"args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                                    "--disable-gpu", "--window-size=1280,1600"]}),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let client = ClientBuilder::new(connector)
        .capabilities(capabilities)
        .connect(&webdriver)
        .await
        .expect("a Chromium session starts");

    client.goto(&format!("http://{address}/")).await.unwrap();
    fill(&client, "#key", KEY).await;
    click(&client, "#connect").await;
    wait_text(&client, "#connected", "1 database").await;

    // Ask with SQL that fails: the page shows the repaired SQL, its rows and both attempts.
    fill(&client, "#question", "What are the names of the singers?").await;
    fill(&client, "#sql", "SELECT nme FROM singer").await;
    click(&client, "#ask").await;
    wait_text(&client, "#answer-status", "executed").await;
    wait_text(&client, "#answer-sql", "SELECT Name FROM singer").await;
    assert_eq!(count(&client, "#attempts li").await, 2);
    assert!(count(&client, "#answer-rows tbody tr").await >= 5);
    wait_text(&client, "#memories-used", "none").await;

    // Reject it: the repair that was judged wrong becomes a negative memory.
    click(&client, "#reject").await;
    wait_text(&client, "#feedback-result", "negative").await;
    wait_text(&client, "#memory-list", "negative").await;

    // Ask again: the page lists the memory it used, with its score; correct the answer.
    fill(&client, "#question", "List the singer names, please.").await;
    click(&client, "#ask").await;
    wait_text(&client, "#answer-episode", "1").await;
    wait_text(&client, "#memories-used", "score").await;
    fill(&client, "#correct-sql", "SELECT Name, Country FROM singer").await;
    click(&client, "#correct").await;
    let result = wait_text(&client, "#feedback-result", "positive").await;
    assert!(result.contains("user_corrected"), "{result}");

    // The corrected memory is visible; retire it from its row.
    let id: String = result
        .split("memory m")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_string();
    let row = format!("#memory-list tr[data-memory='{id}']");
    wait_text(&client, &row, "SELECT Name, Country FROM singer").await;
    assert_eq!(count(&client, "#memory-list tr").await, 2);
    fill(&client, "#retire-reason", "checked in the browser").await;
    click(&client, &format!("{row} button.retire")).await;
    wait_text(&client, &format!("{row} button.restore"), "Restore").await;
    let class = client
        .find(Locator::Css(&row))
        .await
        .unwrap()
        .attr("class")
        .await
        .unwrap();
    assert_eq!(class.as_deref(), Some("retired"));

    // Search finds it; the growth plot has a point per finalized episode.
    fill(&client, "#search", "Country").await;
    click(&client, "#search-button").await;
    wait_text(&client, "#memory-list", "SELECT Name, Country FROM singer").await;
    let points = client
        .find(Locator::Css("#memories-line"))
        .await
        .unwrap()
        .attr("points")
        .await
        .unwrap()
        .unwrap_or_default();
    assert_eq!(points.split_whitespace().count(), 2, "{points}");
    wait_text(&client, "#stats", "2 memories (1 retired)").await;

    client.close().await.unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
}
