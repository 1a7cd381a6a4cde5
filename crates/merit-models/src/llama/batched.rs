//! Continuous batching: the calls of concurrent callers decoded together, one llama.cpp batch
//! per step, in one context with one KV sequence per conversation.
//!
//! On a CPU, generating one token is bound by reading the weights from memory; a step that
//! generates one token for each of four conversations reads them once, so it costs little more
//! than a step for one. The worker therefore keeps up to [`LlamaConfig::parallel`]
//! conversations in flight: every step it gathers the next token of each generating
//! conversation, fills the rest of the batch with the prompts of conversations that just
//! arrived, decodes once, and lets each conversation choose its next token from its own
//! logits. A conversation joins between steps when a sequence is free and leaves the moment
//! its reply ends, so a long reply never holds the others back.
//!
//! Each sequence keeps the tokens of its last conversation in the KV cache, and a new call goes
//! to the free sequence whose cache its prompt continues (at least [`MIN_SLOT_MATCH`] tokens
//! shared, at most [`MAX_TAIL_DROPPED`] cached tokens past them), else to the least recently
//! used free one: a stream that sends its next prompt usually finds its previous one still
//! cached, as with the one-at-a-time engine's slots, and a conversation that only opens like
//! another does not cut that one's cache back.
//!
//! Prefixes are shared across sequences too. Concurrent streams of one experiment send
//! prompts that open alike (the instructions, the schema, the question), and on a CPU
//! evaluating a prompt is compute-bound: it does not get cheaper in a batch, so two sequences
//! evaluating the same opening side by side pay for it twice. A new call therefore takes the
//! longest prefix of its prompt that any sequence holds, in use or not, when that is at least
//! [`MIN_SLOT_MATCH`] tokens more than its own sequence keeps: the donor's KV entries are
//! copied into its sequence (llama.cpp copies the donor's whole window, a few milliseconds,
//! then the tail past the shared prefix is dropped). A call whose prompt shares a longer prefix
//! with a prompt still being evaluated waits for that evaluation instead of repeating it beside
//! it, and copies the result. The copied entries were computed in another batch, so they can
//! round differently from entries the call would have computed itself; like everything else
//! that depends on which calls meet in a batch, this matters only for live replies.
//!
//! What differs from one call at a time: matrix products over several rows can round
//! differently from the single-row kernels, so a near-tie between two tokens can flip and a
//! reply can differ from the one-at-a-time reply (how often is measured by `merit bench models
//! --streams`, and documented in the README). Replies served from the reply cache are
//! unaffected. Prompt-lookup decoding is not used here: its drafts would compete with the
//! other conversations for the batch.

use super::{
    choose_token, common_prefix, find_stop, server_error, token_choosers, CallStats, Formatter,
    Job, LlamaConfig, LlamaModelInfo, Switches, MIN_SLOT_MATCH,
};
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use merit_core::model::{ChatReply, ChatRequest, ModelError};
use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Instant;

/// At most this many cached tokens may be dropped when a new call reuses a sequence in place:
/// enough for a stop string cut from a reply, or a reply end that tokenises differently once
/// it is part of the next prompt; more means the sequence holds another conversation.
const MAX_TAIL_DROPPED: usize = 32;

/// Where an answer goes back to its caller.
type ReplyTo = mpsc::Sender<Result<(ChatReply, CallStats), ModelError>>;

/// One KV sequence of the shared context and what it holds.
struct Sequence {
    id: i32,
    /// The tokens whose keys and values are in this sequence, position by position.
    cached: Vec<LlamaToken>,
    /// Clock value of the last call placed here (least recently used goes first).
    last_used: u64,
    /// A cache clear arrived while a conversation was using this sequence: forget its
    /// contents when the conversation ends.
    forget_after: bool,
    busy: bool,
}

/// Where a conversation is: evaluating its prompt, or generating.
enum Phase {
    /// The prompt from this index on is not evaluated yet.
    Prompt { next: usize },
    /// This chosen reply token is to be evaluated next (its logits choose the one after).
    Generating { last: LlamaToken },
}

/// A call in flight.
struct Conversation {
    sequence: usize,
    request: Box<ChatRequest>,
    reply_to: ReplyTo,
    started: Instant,
    prompt_len: usize,
    prompt: Vec<LlamaToken>,
    reused: usize,
    /// Of `reused`, the tokens copied from another sequence.
    shared: usize,
    sampler: Option<LlamaSampler>,
    grammar: Option<LlamaSampler>,
    phase: Phase,
    generated: usize,
    bytes: Vec<u8>,
    text: String,
    prompt_done: Option<Instant>,
    steps: u32,
}

/// How a conversation's last token choice left it.
enum Next {
    Continue(LlamaToken),
    Done,
}

/// A call that arrived, prompt and token choosers prepared, and waits for a free sequence
/// (or for a prompt in flight that opens like its own, see [`BatchedEngine::awaits_prefix`]).
struct Pending {
    request: Box<ChatRequest>,
    reply_to: ReplyTo,
    started: Instant,
    tokens: Vec<LlamaToken>,
    sampler: Option<LlamaSampler>,
    grammar: Option<LlamaSampler>,
}

/// The context, its sequences and the conversations in flight.
pub(super) struct BatchedEngine<'m> {
    model: &'m LlamaModel,
    context: LlamaContext<'m>,
    pub(super) format: Formatter<'m>,
    sequences: Vec<Sequence>,
    conversations: Vec<Conversation>,
    pending: VecDeque<Pending>,
    clock: u64,
    batch_size: usize,
    /// The window of one conversation (prompt and reply), as in the one-at-a-time engine.
    context_size: u32,
}

impl<'m> BatchedEngine<'m> {
    pub(super) fn new(
        model: &'m LlamaModel,
        config: &LlamaConfig,
    ) -> Result<BatchedEngine<'m>, ModelError> {
        let backend = super::backend()?;
        // Every caller alternates between as many conversations as it has slots (an agent and
        // its simulator): with fewer sequences than that, callers would evict each other's
        // prefixes at every turn and re-read whole conversations.
        let sequences = config.parallel * config.cache_slots;
        let threads = i32::try_from(config.threads).unwrap_or(i32::MAX);
        let sequence_count = u32::try_from(sequences).unwrap_or(u32::MAX);
        // Each sequence gets a window of its own (llama.cpp splits the context evenly unless
        // the cache is unified), so a long conversation cannot crowd out the others.
        let total = config.context_size.saturating_mul(sequence_count);
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(total))
            .with_n_seq_max(sequence_count)
            .with_n_batch(config.batch_size)
            .with_n_ubatch(config.batch_size)
            .with_n_threads(threads)
            .with_n_threads_batch(threads);
        let context = model.new_context(backend, params).map_err(|error| {
            ModelError::Unavailable(format!(
                "llama.cpp could not create a context for {sequences} conversations of {} \
                 tokens for {} ({error})",
                config.context_size,
                config.model_path.display()
            ))
        })?;
        let per_sequence = context.n_ctx() / sequence_count.max(1);
        let context_size = per_sequence.min(config.context_size);
        let batch_size = (context.n_batch().min(config.batch_size) as usize).max(sequences);
        Ok(BatchedEngine {
            model,
            context,
            format: Formatter::new(model, config),
            sequences: (0..sequences)
                .map(|id| Sequence {
                    id: i32::try_from(id).unwrap_or(i32::MAX),
                    cached: Vec::new(),
                    last_used: 0,
                    forget_after: false,
                    busy: false,
                })
                .collect(),
            conversations: Vec::new(),
            pending: VecDeque::new(),
            clock: 0,
            batch_size,
            context_size,
        })
    }

    pub(super) fn info(&self) -> LlamaModelInfo {
        self.format.info(self.context_size)
    }

    /// Serves jobs until the queue closes and every call has been answered.
    pub(super) fn serve(&mut self, switches: &Switches, inbox: &mpsc::Receiver<Job>) {
        let mut open = true;
        let mut batch = LlamaBatch::new(self.batch_size, 1);
        loop {
            if self.conversations.is_empty() && self.pending.is_empty() {
                if !open {
                    return;
                }
                // Nothing to do: sleep until a job arrives.
                match inbox.recv() {
                    Ok(job) => self.accept(job),
                    Err(_) => return,
                }
            }
            // Take in everything that arrived meanwhile, so that it joins this step.
            loop {
                match inbox.try_recv() {
                    Ok(job) => self.accept(job),
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => {
                        open = false;
                        break;
                    }
                }
            }
            self.start_pending(switches.prefix_reuse.load(Ordering::SeqCst));
            if self.conversations.is_empty() {
                continue;
            }
            let stepped = catch_unwind(AssertUnwindSafe(|| self.step(&mut batch)));
            let failure = match stepped {
                Ok(Ok(())) => continue,
                Ok(Err(error)) => error,
                Err(_) => server_error("llama.cpp generation failed unexpectedly".to_string()),
            };
            // A failed decode leaves every sequence's cache in an unknown state: each call in
            // flight gets the error, and nothing cached is trusted afterwards.
            for conversation in self.conversations.drain(..) {
                let _ = conversation.reply_to.send(Err(failure.clone()));
            }
            self.context.clear_kv_cache();
            for sequence in &mut self.sequences {
                sequence.cached.clear();
                sequence.busy = false;
                sequence.forget_after = false;
            }
        }
    }

    /// Handles one job: renders and cache clears at once, calls into the queue. A call that
    /// cannot be started (a bad prompt or grammar) is answered with its error at once.
    fn accept(&mut self, job: Job) {
        match job {
            Job::Chat(request, reply_to) => {
                let started = Instant::now();
                let prepared = catch_unwind(AssertUnwindSafe(|| {
                    let tokens = self.format.prompt(&request, self.context_size)?;
                    let choosers = token_choosers(self.model, &request.decoding)?;
                    Ok((tokens, choosers))
                }))
                .unwrap_or_else(|_| {
                    Err(ModelError::InvalidRequest(
                        "the prompt could not be prepared".to_string(),
                    ))
                });
                match prepared {
                    Ok((tokens, (sampler, grammar))) => self.pending.push_back(Pending {
                        request,
                        reply_to,
                        started,
                        tokens,
                        sampler,
                        grammar,
                    }),
                    Err(error) => {
                        let _ = reply_to.send(Err(error));
                    }
                }
            }
            Job::Render(messages, reply_to) => {
                let _ = reply_to.send(self.format.rendered(&messages));
            }
            Job::ClearCache(reply_to) => {
                for index in 0..self.sequences.len() {
                    if self.sequences[index].busy {
                        self.sequences[index].forget_after = true;
                    } else {
                        self.forget(index);
                    }
                }
                let _ = reply_to.send(());
            }
        }
    }

    fn forget(&mut self, index: usize) {
        let sequence = &mut self.sequences[index];
        let removed = self
            .context
            .clear_kv_cache_seq(Some(sequence.id as u32), None, None)
            .unwrap_or(false);
        sequence.cached.clear();
        sequence.forget_after = false;
        if !removed {
            // Cannot happen for a transformer's cache; if it does, nothing cached is safe.
            self.context.clear_kv_cache();
            for sequence in &mut self.sequences {
                sequence.cached.clear();
            }
        }
    }

    /// Places waiting calls on free sequences, in arrival order, except calls that wait for a
    /// prompt in flight to reach the prefix they share with it (a later call may start first).
    fn start_pending(&mut self, reuse: bool) {
        let mut at = 0;
        while at < self.pending.len() && self.sequences.iter().any(|sequence| !sequence.busy) {
            if reuse && self.awaits_prefix(&self.pending[at].tokens) {
                at += 1;
                continue;
            }
            let Some(call) = self.pending.remove(at) else {
                return;
            };
            let (sequence, reused, shared) = self.place(&call.tokens, reuse);
            self.conversations.push(Conversation {
                sequence,
                request: call.request,
                reply_to: call.reply_to,
                started: call.started,
                prompt_len: call.tokens.len(),
                prompt: call.tokens,
                reused,
                shared,
                sampler: call.sampler,
                grammar: call.grammar,
                phase: Phase::Prompt { next: reused },
                generated: 0,
                bytes: Vec::new(),
                text: String::new(),
                prompt_done: None,
                steps: 0,
            });
        }
    }

    /// Whether a call with prompt `tokens` should wait: a conversation in flight is evaluating
    /// a prompt that shares at least [`MIN_SLOT_MATCH`] more tokens with it than any sequence
    /// holds now, so once that evaluation is done the call can copy them instead of
    /// evaluating the same tokens beside it. The wait ends when the prefix is cached (or its
    /// conversation leaves), and a conversation's prompt advances every step, so it is short.
    fn awaits_prefix(&self, tokens: &[LlamaToken]) -> bool {
        let limit = tokens.len().saturating_sub(1);
        let held = self.longest_held(tokens).map_or(0, |(_, shared)| shared);
        self.conversations.iter().any(|conversation| {
            matches!(conversation.phase, Phase::Prompt { .. })
                && !self.sequences[conversation.sequence].forget_after
                && common_prefix(&conversation.prompt, tokens).min(limit) >= held + MIN_SLOT_MATCH
        })
    }

    /// The sequence, in use or not, holding the longest prefix of `tokens` (ties: the lower
    /// id) and its length, at most all tokens but the last (whose logits must be computed).
    /// Sequences to be forgotten after a cache clear are not offered.
    fn longest_held(&self, tokens: &[LlamaToken]) -> Option<(usize, usize)> {
        let limit = tokens.len().saturating_sub(1);
        self.sequences
            .iter()
            .enumerate()
            .filter(|(_, sequence)| !sequence.forget_after)
            .map(|(index, sequence)| (index, common_prefix(&sequence.cached, tokens).min(limit)))
            .max_by_key(|&(index, shared)| (shared, std::cmp::Reverse(index)))
    }

    /// Takes the free sequence that suits `tokens` for a new call and gives it the longest
    /// cached prefix of them: its own, trimmed, or another sequence's, copied when that is at
    /// least [`MIN_SLOT_MATCH`] tokens longer. Returns the sequence, how many tokens it holds
    /// for the call, and how many of those were copied.
    fn place(&mut self, tokens: &[LlamaToken], reuse: bool) -> (usize, usize, usize) {
        self.clock += 1;
        let index = self.choose_sequence(tokens, reuse);
        // Keep the longest cached prefix, but always evaluate the last prompt token: its
        // logits choose the first reply token and are not kept from earlier calls.
        let own = if reuse {
            common_prefix(&self.sequences[index].cached, tokens).min(tokens.len() - 1)
        } else {
            0
        };
        let donor = if reuse {
            self.longest_held(tokens)
                .filter(|&(source, shared)| source != index && shared >= own + MIN_SLOT_MATCH)
        } else {
            None
        };
        let shared = match donor {
            Some((source, shared)) if self.copy_prefix(source, index, shared) => shared,
            _ => {
                self.keep_prefix(index, own);
                0
            }
        };
        let sequence = &mut self.sequences[index];
        sequence.busy = true;
        sequence.last_used = self.clock;
        (index, sequence.cached.len(), shared)
    }

    /// Trims sequence `index` to its first `keep` tokens.
    fn keep_prefix(&mut self, index: usize, keep: usize) {
        if keep == 0 {
            self.forget(index);
        } else if keep < self.sequences[index].cached.len() {
            let id = self.sequences[index].id as u32;
            let removed = self
                .context
                .clear_kv_cache_seq(Some(id), u32::try_from(keep).ok(), None)
                .unwrap_or(false);
            if removed {
                self.sequences[index].cached.truncate(keep);
            } else {
                // Some cache types cannot drop a tail; start over rather than reuse wrongly.
                self.forget(index);
            }
        }
    }

    /// Makes sequence `target` hold the first `count` tokens of sequence `source`. Between the
    /// sequences of a split cache llama.cpp copies only whole windows, and does so at the start
    /// of the next decode, before that decode writes anything: so the source's entries as they
    /// are now are copied, and the target's tail past `count` is dropped at once. False (the
    /// target then holds nothing) when llama.cpp refuses.
    fn copy_prefix(&mut self, source: usize, target: usize, count: usize) -> bool {
        let (from, to) = (self.sequences[source].id, self.sequences[target].id);
        let prefix = self.sequences[source].cached[..count].to_vec();
        self.forget(target);
        // (Forgetting can fail only by clearing every sequence, the source's too.)
        let copied = self.sequences[source].cached.len() >= count
            && self.context.copy_kv_cache_seq(from, to, None, None).is_ok();
        let trimmed = copied
            && self
                .context
                .clear_kv_cache_seq(Some(to as u32), u32::try_from(count).ok(), None)
                .unwrap_or(false);
        if !trimmed {
            self.forget(target);
            return false;
        }
        self.sequences[target].cached = prefix;
        true
    }

    /// The free sequence holding the longest prefix of `tokens` (ties: the lower id), when it
    /// shares at least [`MIN_SLOT_MATCH`] tokens and keeping only those drops at most
    /// [`MAX_TAIL_DROPPED`] of what it holds; otherwise (or with reuse off) the least recently
    /// used free one (ties: the lower id). Depends only on the calls so far.
    ///
    /// The tail rule tells a conversation's own earlier call (its next prompt extends it; at
    /// most a stop string or a re-tokenised reply end differs) from another conversation that
    /// merely opens alike (the same instructions and schema, then another task): cutting that
    /// one back to the common opening would make its next turn re-read everything after it.
    /// The new call takes the least recently used sequence instead, and [`Self::place`] copies
    /// the common opening into it.
    fn choose_sequence(&self, tokens: &[LlamaToken], reuse: bool) -> usize {
        let free = || {
            self.sequences
                .iter()
                .enumerate()
                .filter(|(_, sequence)| !sequence.busy)
        };
        if reuse {
            let best = free()
                .map(|(index, sequence)| {
                    let shared = common_prefix(&sequence.cached, tokens);
                    (shared, sequence.cached.len() - shared, index)
                })
                .filter(|&(shared, dropped, _)| {
                    shared >= MIN_SLOT_MATCH && dropped <= MAX_TAIL_DROPPED
                })
                .max_by_key(|&(shared, _, index)| (shared, std::cmp::Reverse(index)));
            if let Some((_, _, index)) = best {
                return index;
            }
        }
        free()
            .min_by_key(|(index, sequence)| (sequence.last_used, *index))
            .map_or(0, |(index, _)| index)
    }

    /// One decode for every conversation in flight: the pending reply token of each
    /// generating one, then prompt tokens of the others as far as the batch holds them.
    /// Conversations whose reply ends are answered and leave.
    fn step(&mut self, batch: &mut LlamaBatch) -> Result<(), ModelError> {
        batch.clear();
        // (conversation, batch index whose logits it chooses from)
        let mut choosers: Vec<(usize, i32)> = Vec::new();
        let mut order: Vec<usize> = (0..self.conversations.len()).collect();
        order.sort_by_key(|&c| self.conversations[c].sequence);
        let mut added = 0usize;
        for &c in &order {
            let conversation = &mut self.conversations[c];
            if let Phase::Generating { last } = conversation.phase {
                let sequence = &mut self.sequences[conversation.sequence];
                add(batch, last, sequence.cached.len(), sequence.id, true)?;
                sequence.cached.push(last);
                choosers.push((c, index(added)));
                conversation.steps += 1;
                added += 1;
            }
        }
        for &c in &order {
            let room = self.batch_size.saturating_sub(added);
            if room == 0 {
                break;
            }
            let conversation = &mut self.conversations[c];
            let Phase::Prompt { next } = conversation.phase else {
                continue;
            };
            let sequence = &mut self.sequences[conversation.sequence];
            let end = (next + room).min(conversation.prompt.len());
            for (offset, &token) in conversation.prompt[next..end].iter().enumerate() {
                let last = next + offset + 1 == conversation.prompt.len();
                add(batch, token, sequence.cached.len(), sequence.id, last)?;
                sequence.cached.push(token);
                if last {
                    choosers.push((c, index(added)));
                }
                added += 1;
            }
            conversation.phase = Phase::Prompt { next: end };
        }
        if let Err(error) = self.context.decode(batch) {
            return Err(server_error(format!("llama.cpp decode failed: {error}")));
        }
        let mut finished = Vec::new();
        for (c, at) in choosers {
            let conversation = &mut self.conversations[c];
            if conversation.prompt_done.is_none() {
                conversation.prompt_done = Some(Instant::now());
                if conversation.request.decoding.max_tokens == 0 {
                    finished.push(c);
                    continue;
                }
            }
            let next = self.choose_next(c, at);
            match next {
                Next::Continue(token) => {
                    self.conversations[c].phase = Phase::Generating { last: token };
                }
                Next::Done => finished.push(c),
            }
        }
        // Answer finished calls, highest index first so that removal keeps the others'.
        finished.sort_unstable_by(|a, b| b.cmp(a));
        for c in finished {
            let conversation = self.conversations.swap_remove(c);
            self.finish(conversation);
        }
        Ok(())
    }

    /// Chooses conversation `c`'s next token from the logits at batch index `at`, with exactly
    /// the stop checks of the one-at-a-time engine.
    fn choose_next(&mut self, c: usize, at: i32) -> Next {
        let conversation = &mut self.conversations[c];
        let token = choose_token(
            &self.context,
            conversation.sampler.as_mut(),
            conversation.grammar.as_mut(),
            at,
        );
        if self.format.is_end_of_generation(token) {
            // The cache holds the prompt and every reply token: all their logits were used.
            return Next::Done;
        }
        conversation.generated += 1;
        conversation.bytes.extend(self.format.piece(token));
        conversation.text = String::from_utf8_lossy(&conversation.bytes).into_owned();
        if let Some(at) = find_stop(&conversation.text, &conversation.request.decoding.stop) {
            conversation.text.truncate(at);
            return Next::Done;
        }
        // This token is not evaluated yet: the cache holds `prompt + generated - 1` tokens,
        // which is what one-at-a-time decoding leaves too.
        let max_tokens = conversation.request.decoding.max_tokens as usize;
        if conversation.generated >= max_tokens
            || conversation.prompt_len + conversation.generated > self.context_size as usize
        {
            return Next::Done;
        }
        Next::Continue(token)
    }

    /// Answers a finished call and frees its sequence (keeping its cache for prefix reuse).
    fn finish(&mut self, conversation: Conversation) {
        let now = Instant::now();
        let prompt_done = conversation.prompt_done.unwrap_or(now);
        let prompt_tokens = u32::try_from(conversation.prompt_len).unwrap_or(u32::MAX);
        let reused_tokens = u32::try_from(conversation.reused).unwrap_or(u32::MAX);
        let shared_tokens = u32::try_from(conversation.shared).unwrap_or(u32::MAX);
        let completion_tokens = u32::try_from(conversation.generated).unwrap_or(u32::MAX);
        let stats = CallStats {
            prompt_tokens,
            slot: u32::try_from(conversation.sequence).unwrap_or(u32::MAX),
            reused_tokens,
            shared_tokens,
            evaluated_tokens: prompt_tokens - reused_tokens,
            completion_tokens,
            prompt_time: prompt_done.duration_since(conversation.started),
            generation_time: now.duration_since(prompt_done),
            drafted_tokens: 0,
            accepted_tokens: 0,
            generation_steps: conversation.steps,
        };
        let reply = ChatReply {
            text: conversation.text,
            prompt_tokens,
            completion_tokens,
            latency: now.duration_since(conversation.started),
            cached: false,
            tool_calls: Vec::new(),
        };
        stats.log();
        let _ = conversation.reply_to.send(Ok((reply, stats)));
        let sequence = &mut self.sequences[conversation.sequence];
        sequence.busy = false;
        if sequence.forget_after {
            self.forget(conversation.sequence);
        }
    }
}

fn index(added: usize) -> i32 {
    i32::try_from(added).unwrap_or(i32::MAX)
}

/// Adds `token` at `position` of sequence `id` to the batch.
fn add(
    batch: &mut LlamaBatch,
    token: LlamaToken,
    position: usize,
    id: i32,
    logits: bool,
) -> Result<(), ModelError> {
    let position = i32::try_from(position).unwrap_or(i32::MAX);
    batch
        .add(token, position, &[id], logits)
        .map_err(|error| server_error(format!("llama.cpp batch: {error}")))
}
