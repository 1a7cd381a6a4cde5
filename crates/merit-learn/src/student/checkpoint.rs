//! Student checkpoints: the five weight tensors as a safetensors file, and a JSON sidecar
//! next to it (`student.safetensors` → `student.json`) with the format, the network shape,
//! the training stage and a checksum of the weights file.
//!
//! Each file is written to a temporary name in the same folder, synced, and renamed over
//! the final name (then the folder is synced), so a reader never sees half a file. The two
//! renames are not one atomic step; the sidecar's FNV-1a checksum of the weights bytes makes
//! a crash between them (new weights, old sidecar) a load error rather than a silent mix.

use super::{Stage, StudentConfig, StudentError, StudentPrm, FEATURES, TENSOR_NAMES};
use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The `format` of every sidecar this version writes.
pub const STUDENT_FORMAT: &str = "merit-learn-student-prm-v1";

/// One tensor's name and shape, as listed in the sidecar.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorMeta {
    /// Name in the safetensors file.
    pub name: String,
    /// Dimensions.
    pub shape: Vec<usize>,
}

/// The JSON sidecar of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointMeta {
    /// [`STUDENT_FORMAT`].
    pub format: String,
    /// The network shape and its initial seed.
    pub config: StudentConfig,
    /// Number of pair features the network was built for.
    pub features: usize,
    /// The training stage of the weights.
    pub stage: Stage,
    /// The tensors in the weights file.
    pub tensors: Vec<TensorMeta>,
    /// FNV-1a 64 of the weights file's bytes, as 16 hex digits.
    pub weights_fnv1a64: String,
}

/// The sidecar path of the weights file `weights` (same name, extension `json`).
pub fn sidecar_path(weights: &Path) -> PathBuf {
    weights.with_extension("json")
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StudentError + '_ {
    move |source| StudentError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn fnv1a64(bytes: &[u8]) -> String {
    format!("{:016x}", merit_core::hash::fnv1a(bytes))
}

impl StudentPrm {
    /// Writes the weights to `path` (safetensors) and the sidecar to [`sidecar_path`], each
    /// atomically; returns the sidecar.
    pub fn save(&self, path: &Path) -> Result<CheckpointMeta, StudentError> {
        let sidecar = sidecar_path(path);
        if sidecar == path {
            return Err(StudentError::Checkpoint {
                path: path.to_path_buf(),
                message: "the weights file must not end in .json (the sidecar takes that name)"
                    .into(),
            });
        }
        let tensors = self.tensors();
        let map: HashMap<String, Tensor> = TENSOR_NAMES
            .iter()
            .zip(&tensors)
            .map(|(name, t)| (name.to_string(), t.detach()))
            .collect();
        let bytes =
            crate::save_safetensors(&map, path).map_err(|message| StudentError::Checkpoint {
                path: path.to_path_buf(),
                message: format!("cannot write the weights: {message}"),
            })?;
        let meta = CheckpointMeta {
            format: STUDENT_FORMAT.to_string(),
            config: self.config().clone(),
            features: FEATURES,
            stage: self.stage(),
            tensors: TENSOR_NAMES
                .iter()
                .zip(&tensors)
                .map(|(name, t)| TensorMeta {
                    name: name.to_string(),
                    shape: t.dims().to_vec(),
                })
                .collect(),
            weights_fnv1a64: fnv1a64(&bytes),
        };
        let mut text =
            serde_json::to_string_pretty(&meta).map_err(|e| StudentError::Checkpoint {
                path: sidecar.clone(),
                message: format!("cannot serialize the sidecar: {e}"),
            })?;
        text.push('\n');
        merit_core::fs::write_atomically(&sidecar, text.as_bytes()).map_err(io(&sidecar))?;
        Ok(meta)
    }

    /// Loads a checkpoint written by [`StudentPrm::save`], checking the sidecar's format,
    /// checksum and every tensor's shape.
    pub fn load(path: &Path) -> Result<StudentPrm, StudentError> {
        let sidecar = sidecar_path(path);
        let text = std::fs::read_to_string(&sidecar).map_err(io(&sidecar))?;
        let bad = |message: String| StudentError::Checkpoint {
            path: sidecar.clone(),
            message,
        };
        let meta: CheckpointMeta =
            serde_json::from_str(&text).map_err(|e| bad(format!("not a student sidecar: {e}")))?;
        if meta.format != STUDENT_FORMAT {
            return Err(bad(format!(
                "format `{}` is not `{STUDENT_FORMAT}`",
                meta.format
            )));
        }
        if meta.features != FEATURES {
            return Err(bad(format!(
                "built for {} pair features, this version has {FEATURES}",
                meta.features
            )));
        }
        let bytes = std::fs::read(path).map_err(io(path))?;
        let checksum = fnv1a64(&bytes);
        if checksum != meta.weights_fnv1a64 {
            return Err(StudentError::Checkpoint {
                path: path.to_path_buf(),
                message: format!(
                    "checksum {checksum} does not match the sidecar's {} (weights and sidecar are from different saves)",
                    meta.weights_fnv1a64
                ),
            });
        }
        let mut tensors =
            candle_core::safetensors::load_buffer(&bytes, &Device::Cpu).map_err(|e| {
                StudentError::Checkpoint {
                    path: path.to_path_buf(),
                    message: format!("not a safetensors file: {e}"),
                }
            })?;
        let mut take = |name: &str| {
            tensors
                .remove(name)
                .ok_or_else(|| StudentError::Checkpoint {
                    path: path.to_path_buf(),
                    message: format!("tensor {name} is missing"),
                })
        };
        let loaded = [
            take(TENSOR_NAMES[0])?,
            take(TENSOR_NAMES[1])?,
            take(TENSOR_NAMES[2])?,
            take(TENSOR_NAMES[3])?,
            take(TENSOR_NAMES[4])?,
        ];
        StudentPrm::from_tensors(meta.config, meta.stage, loaded).map_err(|e| {
            StudentError::Checkpoint {
                path: path.to_path_buf(),
                message: e.to_string(),
            }
        })
    }
}
