//! A small OpenAI-compatible stand-in server for the binary's tests: chat completions from a
//! function the test gives, bag-of-words embeddings, one thread per connection.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};

/// Bag-of-words embeddings over `words`, plus a constant component.
fn embeddings(body: &Value, words: &[&str]) -> Value {
    let data: Vec<Value> = body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(index, text)| {
            let lower = text.as_str().unwrap_or("").to_lowercase();
            let mut v: Vec<f32> = words
                .iter()
                .map(|w| lower.matches(w).count() as f32)
                .collect();
            v.push(1.0);
            json!({"object": "embedding", "index": index, "embedding": v})
        })
        .collect();
    json!({"object": "list", "data": data, "model": "e", "usage": {"prompt_tokens": 1, "total_tokens": 1}})
}

fn handle(stream: TcpStream, chat: fn(&Value) -> Value, words: &[&str]) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return;
    }
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .to_string();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((key, value)) = line.split_once(':') {
            if key.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0u8; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let reply = if path.ends_with("/embeddings") {
        embeddings(&body, words)
    } else {
        chat(&body)
    }
    .to_string();
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
        reply.len()
    );
    let mut stream = stream;
    let _ = stream.write_all(response.as_bytes());
}

/// Starts the stand-in on a free port with `chat` answering chat requests and bag-of-words
/// embeddings over `words`; returns its base URL. It runs until the test process ends.
pub fn serve(chat: fn(&Value) -> Value, words: &'static [&'static str]) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || handle(stream, chat, words));
        }
    });
    base
}
