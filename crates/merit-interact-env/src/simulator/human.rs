//! A person at the terminal as the user (for one's own tasks, which have no ground truth).
//!
//! The agent's questions are shown and the person types the answer; a submission is shown
//! with the first rows it returns, and the person accepts it (`y`), rejects it (`n`), or
//! rejects it with a comment (any other text, which the agent reads). An empty answer to a
//! question says "I don't know". End of input counts as rejecting (and as no answer), so a
//! closed terminal ends the episode instead of hanging it.
//!
//! Generic over the reader and writer so tests can drive it; the CLI gives it stdin and
//! stderr (stdout carries the report).

use super::{SimulatorContext, SimulatorError, SimulatorUsage, UserSimulator, UserVerdict};
use std::io::{BufRead, Write};

/// What an empty answer to a question is sent as.
pub const NO_ANSWER: &str = "I don't know.";

/// The person at the terminal (see the module docs).
#[derive(Debug)]
pub struct HumanSimulator<R, W> {
    input: R,
    output: W,
    asks: u64,
}

impl<R: BufRead, W: Write> HumanSimulator<R, W> {
    /// A user who reads from `input` and is shown everything on `output`.
    pub fn new(input: R, output: W) -> HumanSimulator<R, W> {
        HumanSimulator {
            input,
            output,
            asks: 0,
        }
    }

    fn read_line(&mut self) -> Result<Option<String>, SimulatorError> {
        let mut line = String::new();
        let read = self
            .input
            .read_line(&mut line)
            .map_err(|e| SimulatorError(format!("cannot read the terminal: {e}")))?;
        Ok((read > 0).then(|| line.trim().to_string()))
    }

    fn show(&mut self, text: &str) -> Result<(), SimulatorError> {
        self.output
            .write_all(text.as_bytes())
            .and_then(|()| self.output.flush())
            .map_err(|e| SimulatorError(format!("cannot write to the terminal: {e}")))
    }
}

impl<R: BufRead, W: Write> UserSimulator for HumanSimulator<R, W> {
    fn reply(
        &mut self,
        question: &str,
        context: &SimulatorContext<'_>,
    ) -> Result<String, SimulatorError> {
        self.asks += 1;
        self.show(&format!(
            "\n[{}] The agent asks: {question}\nyour answer> ",
            context.task.instance_id()
        ))?;
        Ok(match self.read_line()? {
            Some(answer) if !answer.is_empty() => answer,
            _ => NO_ANSWER.to_string(),
        })
    }

    fn usage(&self) -> SimulatorUsage {
        SimulatorUsage {
            asks: self.asks,
            ..SimulatorUsage::default()
        }
    }

    fn judges_without_truth(&self) -> bool {
        true
    }

    fn verdict(&mut self, sql: &str, preview: &str) -> Result<UserVerdict, SimulatorError> {
        self.show(&format!(
            "\nThe agent submits:\n{sql}\nIt returns:\n{preview}\naccept? [y = accept, n = reject, or type what is wrong]> "
        ))?;
        Ok(match self.read_line()? {
            Some(answer) if matches!(answer.to_lowercase().as_str(), "y" | "yes") => {
                UserVerdict::Accept
            }
            Some(answer) if matches!(answer.to_lowercase().as_str(), "n" | "no" | "") => {
                UserVerdict::Reject(String::new())
            }
            Some(comment) => UserVerdict::Reject(comment),
            None => UserVerdict::Reject(String::new()),
        })
    }
}
