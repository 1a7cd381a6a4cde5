//! llama.cpp's own `llama-batched-bench`, run as the baseline of `merit bench models`.

use super::models::median;
use anyhow::{anyhow, Result};

/// Prompt and generation speed as llama.cpp's own tool reports them.
pub(super) struct ToolSpeed {
    pub(super) prompt: f64,
    pub(super) generation: f64,
}

/// Runs `llama-batched-bench` (one sequence) `repeat` times and takes the median of its
/// `S_PP t/s` and `S_TG t/s` columns. The tool gets a clean OpenMP environment: it is the
/// baseline a user would get by running llama.cpp, not merit's process settings.
pub(super) fn llama_batched_bench(
    tool: &std::path::Path,
    model: &std::path::Path,
    prompt_tokens: usize,
    generated_tokens: usize,
    threads: usize,
    repeat: usize,
) -> Result<ToolSpeed> {
    let mut prompt = Vec::new();
    let mut generation = Vec::new();
    let context = (prompt_tokens + generated_tokens + 64)
        .next_power_of_two()
        .max(512);
    for _ in 0..repeat {
        let output = std::process::Command::new(tool)
            .env_remove("OMP_WAIT_POLICY")
            .env_remove("GOMP_SPINCOUNT")
            .args(["-m"])
            .arg(model)
            .args(["-c", &context.to_string()])
            .args(["-b", "512", "-ub", "512"])
            .args(["-npp", &prompt_tokens.to_string()])
            .args(["-ntg", &generated_tokens.to_string()])
            .args(["-npl", "1", "-t", &threads.to_string()])
            .output()
            .map_err(|error| anyhow!("cannot run {}: {error}", tool.display()))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            return Err(anyhow!(
                "{} failed ({}): {}",
                tool.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            ));
        }
        let (pp, tg) = parse_batched_bench(&stdout)
            .ok_or_else(|| anyhow!("no result row in llama-batched-bench's output:\n{stdout}"))?;
        prompt.push(pp);
        generation.push(tg);
    }
    Ok(ToolSpeed {
        prompt: median(&mut prompt),
        generation: median(&mut generation),
    })
}

/// The `S_PP t/s` and `S_TG t/s` cells of the first result row of `llama-batched-bench`'s
/// Markdown table.
fn parse_batched_bench(output: &str) -> Option<(f64, f64)> {
    batched_bench_rows(output)
        .first()
        .map(|&(_, prompt, generation)| (prompt, generation))
}

/// Every result row of `llama-batched-bench`'s Markdown table, read by column name: the number
/// of parallel sequences (`B`), `S_PP t/s` and `S_TG t/s`.
pub(crate) fn batched_bench_rows(output: &str) -> Vec<(usize, f64, f64)> {
    let mut header: Option<Vec<String>> = None;
    let mut rows = Vec::new();
    for line in output.lines().map(str::trim).filter(|l| l.starts_with('|')) {
        let cells: Vec<String> = line
            .trim_matches('|')
            .split('|')
            .map(|cell| cell.trim().to_string())
            .collect();
        match &header {
            None if cells.iter().any(|c| c == "S_PP t/s") => header = Some(cells),
            Some(names) if cells.iter().all(|c| !c.starts_with('-')) => {
                let cell = |name: &str| {
                    names
                        .iter()
                        .position(|n| n == name)
                        .and_then(|at| cells.get(at))
                };
                let parsed = (|| {
                    Some((
                        cell("B")?.parse().ok()?,
                        cell("S_PP t/s")?.parse().ok()?,
                        cell("S_TG t/s")?.parse().ok()?,
                    ))
                })();
                rows.extend(parsed);
            }
            _ => {}
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batched_bench_table_is_read_by_column_name() {
        let output = "main: n_kv_max = 1024\n\n\
|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |\n\
|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|\n\
|   642 |     56 |    1 |    698 |    2.547 |   252.07 |    1.212 |    46.20 |    3.759 |   185.68 |\n";
        assert_eq!(parse_batched_bench(output), Some((252.07, 46.20)));
        assert_eq!(parse_batched_bench("no table"), None);
        let several = format!(
            "{output}|   642 |     56 |    4 |   2792 |    9.000 |   285.30 |    3.000 |    74.20 |    1.0 |    1.0 |\n"
        );
        assert_eq!(
            batched_bench_rows(&several),
            vec![(1, 252.07, 46.20), (4, 285.30, 74.20)]
        );
    }
}
