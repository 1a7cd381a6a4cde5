//! Draft proposals for prompt-lookup (n-gram) speculative decoding.
//!
//! A repair reply mostly copies SQL that is already in the prompt (the previous attempt, the
//! schema's names). The last few generated tokens are looked up in everything seen so far
//! (prompt and reply); the tokens that followed their most recent earlier occurrence are a
//! cheap guess at what comes next. The model then checks the guess in one batch (see
//! [`super::Engine`]), so a wrong guess costs time but never changes the output.

/// How drafts are proposed for prompt-lookup decoding ([`super::LlamaConfig::prompt_lookup`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptLookup {
    /// Longest n-gram of the reply's end that is looked up (tried first); default 4.
    pub max_ngram: usize,
    /// Shortest n-gram looked up; default 2. A shorter match is found more often but is a
    /// worse predictor: in the 7-step benchmark episode, 1-grams drafted more and made
    /// lookup slower.
    pub min_ngram: usize,
    /// Most draft tokens checked in one batch; default 16 (copied SQL runs are long).
    pub max_draft: usize,
}

impl Default for PromptLookup {
    fn default() -> PromptLookup {
        PromptLookup {
            max_ngram: 4,
            min_ngram: 2,
            max_draft: 16,
        }
    }
}

impl PromptLookup {
    /// The tokens proposed to follow `history`: for n from `max_ngram` down to `min_ngram`,
    /// the last n tokens of `history` are searched for earlier in `history`, and at the most
    /// recent earlier occurrence of the longest n that has one, up to `limit` (and at most
    /// `max_draft`) tokens that followed it are returned. Empty when nothing matches.
    pub fn draft<'h, T: PartialEq>(&self, history: &'h [T], limit: usize) -> &'h [T] {
        let limit = limit.min(self.max_draft);
        if limit == 0 {
            return &[];
        }
        for n in (self.min_ngram.max(1)..=self.max_ngram).rev() {
            if history.len() <= n {
                continue;
            }
            let suffix_start = history.len() - n;
            let suffix = &history[suffix_start..];
            // The most recent occurrence: in a repair conversation that is the previous
            // attempt, the text most likely to be copied.
            if let Some(start) = (0..suffix_start)
                .rev()
                .find(|&start| &history[start..start + n] == suffix)
            {
                let from = start + n;
                let to = (from + limit).min(history.len());
                return &history[from..to];
            }
        }
        &[]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(max_ngram: usize, min_ngram: usize, max_draft: usize) -> PromptLookup {
        PromptLookup {
            max_ngram,
            min_ngram,
            max_draft,
        }
    }

    #[test]
    fn the_longest_matching_ngram_wins_at_its_most_recent_occurrence() {
        // "2 3" occurs at 1 and 6; "1 2 3" only at 0: the 3-gram's continuation is chosen.
        let history = [1, 2, 3, 4, 5, 9, 2, 3, 7, 1, 2, 3];
        assert_eq!(
            lookup(3, 1, 8).draft(&history, 8),
            &[4, 5, 9, 2, 3, 7, 1, 2]
        );
        // With 2-grams at most, the most recent "2 3" (at 6) is followed by 7.
        assert_eq!(lookup(2, 1, 3).draft(&history, 8), &[7, 1, 2]);
    }

    #[test]
    fn drafts_respect_both_limits_and_the_end_of_history() {
        let history = [5, 6, 7, 8, 5, 6];
        assert_eq!(lookup(3, 1, 10).draft(&history, 1), &[7]);
        assert_eq!(lookup(3, 1, 2).draft(&history, 10), &[7, 8]);
        assert_eq!(lookup(3, 1, 10).draft(&history, 10), &[7, 8, 5, 6]);
        assert!(lookup(3, 1, 10).draft(&history, 0).is_empty());
    }

    #[test]
    fn no_match_or_too_short_a_history_gives_no_draft() {
        assert!(lookup(3, 1, 10).draft(&[1, 2, 3, 4], 10).is_empty());
        assert!(lookup(3, 1, 10).draft::<i32>(&[], 10).is_empty());
        assert!(lookup(3, 1, 10).draft(&[1], 10).is_empty());
        // A 1-gram match is ignored when 1-grams are not allowed.
        assert!(lookup(3, 2, 10).draft(&[1, 2, 3, 1], 10).is_empty());
        assert_eq!(lookup(3, 1, 10).draft(&[1, 2, 3, 1], 10), &[2, 3, 1]);
    }
}
