//! In-process sentence embeddings: all-MiniLM-L6-v2 through candle.
//!
//! [`MiniLmEmbedder`] runs candle's `BertModel` on the CPU and turns its token states into one
//! sentence vector the way sentence-transformers does for this model: the mean of the token
//! states over the attention mask (padding does not count), then L2 normalisation.
//!
//! Tokenization uses the model's own `tokenizer.json`, with two settings overridden: the
//! shipped file pads every input to a fixed 128 tokens and truncates at 128, while the model
//! was trained for up to 256 tokens (`sentence_bert_config.json`). Here a batch is padded only
//! to its longest member (less work, same vectors), and inputs are truncated at 256 tokens or
//! the model's position limit, whichever is smaller.
//!
//! The embedder holds no mutable state, so calls from several threads run side by side.

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config as BertConfig};
use merit_core::model::{Embedder, ModelError};
use std::path::{Path, PathBuf};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

/// Name of the default embedding model.
pub const DEFAULT_EMBEDDING_MODEL: &str = "all-MiniLM-L6-v2";

/// Longest input, in tokens, all-MiniLM-L6-v2 was trained on; longer texts are truncated.
pub const MINILM_MAX_TOKENS: usize = 256;

/// Sentences embedded in one forward pass by default.
pub const DEFAULT_BATCH_SIZE: usize = 32;

/// Where the model files are and how to run them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MiniLmConfig {
    /// `model.safetensors`.
    pub weights: PathBuf,
    /// `tokenizer.json`.
    pub tokenizer: PathBuf,
    /// `config.json` (the BERT hyper-parameters).
    pub config: PathBuf,
    /// Model name used in [`Embedder::id`] (`candle:{name}`).
    pub name: String,
    /// Texts per forward pass (default 32).
    pub batch_size: usize,
    /// Truncation length in tokens (default [`MINILM_MAX_TOKENS`]; capped by the model's
    /// position limit).
    pub max_tokens: usize,
}

impl MiniLmConfig {
    /// The three files inside `dir`, as the model is distributed, with default settings.
    pub fn from_dir(dir: impl AsRef<Path>) -> MiniLmConfig {
        let dir = dir.as_ref();
        MiniLmConfig {
            weights: dir.join("model.safetensors"),
            tokenizer: dir.join("tokenizer.json"),
            config: dir.join("config.json"),
            name: DEFAULT_EMBEDDING_MODEL.to_string(),
            batch_size: DEFAULT_BATCH_SIZE,
            max_tokens: MINILM_MAX_TOKENS,
        }
    }
}

/// all-MiniLM-L6-v2 (or another BERT sentence encoder with mean pooling) on candle's CPU
/// backend.
pub struct MiniLmEmbedder {
    id: String,
    model: BertModel,
    tokenizer: Tokenizer,
    device: Device,
    dimension: usize,
    batch_size: usize,
}

impl std::fmt::Debug for MiniLmEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MiniLmEmbedder")
            .field("id", &self.id)
            .field("dimension", &self.dimension)
            .field("batch_size", &self.batch_size)
            .finish_non_exhaustive()
    }
}

impl MiniLmEmbedder {
    /// Loads the model from a directory holding `model.safetensors`, `tokenizer.json` and
    /// `config.json`.
    pub fn load(dir: impl AsRef<Path>) -> Result<MiniLmEmbedder, ModelError> {
        MiniLmEmbedder::load_with(MiniLmConfig::from_dir(dir))
    }

    /// Loads the model from explicitly named files.
    ///
    /// Every failure is [`ModelError::Unavailable`] naming the file at fault.
    pub fn load_with(config: MiniLmConfig) -> Result<MiniLmEmbedder, ModelError> {
        let unavailable = |path: &Path, why: String| {
            ModelError::Unavailable(format!("embedding model file {}: {why}", path.display()))
        };
        if config.batch_size == 0 {
            return Err(ModelError::InvalidRequest(
                "the embedding batch size must be at least 1".to_string(),
            ));
        }
        let bert_text = std::fs::read_to_string(&config.config)
            .map_err(|error| unavailable(&config.config, error.to_string()))?;
        let bert: BertConfig = serde_json::from_str(&bert_text).map_err(|error| {
            unavailable(&config.config, format!("not a BERT config.json: {error}"))
        })?;

        let mut tokenizer = Tokenizer::from_file(&config.tokenizer)
            .map_err(|error| unavailable(&config.tokenizer, error.to_string()))?;
        let pad_token = tokenizer
            .get_padding()
            .map(|p| (p.pad_id, p.pad_type_id, p.pad_token.clone()))
            .unwrap_or((0, 0, "[PAD]".to_string()));
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            pad_id: pad_token.0,
            pad_type_id: pad_token.1,
            pad_token: pad_token.2,
            ..PaddingParams::default()
        }));
        let max_tokens = config.max_tokens.min(bert.max_position_embeddings).max(2);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_tokens,
                ..TruncationParams::default()
            }))
            .map_err(|error| unavailable(&config.tokenizer, error.to_string()))?;

        let device = Device::Cpu;
        // Memory-mapping keeps loading instant; the file must not change while it is mapped,
        // which holds for model files that are only ever replaced by a rename.
        // SAFETY: see the comment above; candle reads the mapping only through checked slices.
        let weights = unsafe {
            VarBuilder::from_mmaped_safetensors(
                std::slice::from_ref(&config.weights),
                DType::F32,
                &device,
            )
        }
        .map_err(|error| unavailable(&config.weights, error.to_string()))?;
        let model = BertModel::load(weights, &bert).map_err(|error| {
            unavailable(
                &config.weights,
                format!("does not match {}: {error}", config.config.display()),
            )
        })?;
        Ok(MiniLmEmbedder {
            id: format!("candle:{}", config.name),
            model,
            tokenizer,
            device,
            dimension: bert.hidden_size,
            batch_size: config.batch_size,
        })
    }

    fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        let failed = |what: &str, error: String| ModelError::Server {
            status: 0,
            body: format!("{} {what}: {error}", self.id),
        };
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|error| ModelError::InvalidRequest(format!("cannot tokenize: {error}")))?;
        let rows = encodings.len();
        let width = encodings.first().map_or(0, |e| e.len());
        let mut ids = Vec::with_capacity(rows * width);
        let mut mask = Vec::with_capacity(rows * width);
        for encoding in &encodings {
            if encoding.len() != width {
                return Err(failed(
                    "tokenizer",
                    "padding produced rows of different lengths".to_string(),
                ));
            }
            ids.extend_from_slice(encoding.get_ids());
            mask.extend_from_slice(encoding.get_attention_mask());
        }
        let run = || -> candle_core::Result<Vec<Vec<f32>>> {
            let ids = Tensor::from_vec(ids, (rows, width), &self.device)?;
            let mask = Tensor::from_vec(mask, (rows, width), &self.device)?;
            let token_types = ids.zeros_like()?;
            let states = self.model.forward(&ids, &token_types, Some(&mask))?;
            // Mean over real tokens only: padded positions get weight 0.
            let weights = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
            let summed = states.broadcast_mul(&weights)?.sum(1)?;
            let counts = weights.sum(1)?.clamp(1e-9f32, f32::MAX)?;
            let means = summed.broadcast_div(&counts)?;
            let norms = means
                .sqr()?
                .sum_keepdim(1)?
                .sqrt()?
                .clamp(1e-12f32, f32::MAX)?;
            means.broadcast_div(&norms)?.to_vec2::<f32>()
        };
        run().map_err(|error| failed("forward pass", error.to_string()))
    }
}

impl Embedder for MiniLmEmbedder {
    fn id(&self) -> String {
        self.id.clone()
    }

    fn dimension(&self) -> usize {
        self.dimension
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.batch_size) {
            vectors.extend(self.embed_batch(batch)?);
        }
        Ok(vectors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_files_are_unavailable_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let error = MiniLmEmbedder::load(dir.path()).unwrap_err();
        assert!(
            matches!(&error, ModelError::Unavailable(m) if m.contains("config.json")),
            "{error}"
        );
    }

    #[test]
    fn a_corrupt_weights_file_is_unavailable_and_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
                "num_attention_heads": 2, "intermediate_size": 16, "hidden_act": "gelu",
                "hidden_dropout_prob": 0.1, "max_position_embeddings": 16,
                "type_vocab_size": 2, "initializer_range": 0.02, "layer_norm_eps": 1e-12,
                "pad_token_id": 0}"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("tokenizer.json"),
            r#"{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
                "normalizer": null, "pre_tokenizer": {"type": "Whitespace"},
                "post_processor": null, "decoder": null,
                "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "a": 1},
                          "unk_token": "[UNK]"}}"#,
        )
        .unwrap();
        std::fs::write(dir.path().join("model.safetensors"), b"\x08\x00garbage").unwrap();
        let error = MiniLmEmbedder::load(dir.path()).unwrap_err();
        assert!(
            matches!(&error, ModelError::Unavailable(m) if m.contains("model.safetensors")),
            "{error}"
        );
    }
}
