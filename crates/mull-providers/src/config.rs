//! Choosing a model from configuration: a `MULL_MODEL` spec plus the usual key variables.
//!
//! Specs:
//! - `openai:gpt-4o-mini` — OpenAI; needs `OPENAI_API_KEY`; `OPENAI_BASE_URL` overrides the
//!   endpoint (e.g. a proxy).
//! - `anthropic:claude-sonnet-4-5` — Anthropic; needs `ANTHROPIC_API_KEY`; `ANTHROPIC_BASE_URL`
//!   overrides the endpoint.
//! - `openai-compatible:http://127.0.0.1:8080/v1#model-name` — any Chat Completions server
//!   (llama.cpp, vLLM, Ollama …); no key needed, `OPENAI_COMPATIBLE_API_KEY` is sent when set.
//!
//! The two Chat Completions specs take options after the model, query-style:
//! `?stream=auto|on|off` chooses whether calls stream ([`Streaming`]; default `auto`: stream,
//! and fall back to — then stay with — non-streaming when a stream ends empty), e.g.
//! `openai-compatible:http://127.0.0.1:8080/v1#local?stream=off`. A caller's
//! [`ModelOverrides`] (a command-line flag) win over the spec's options.
//!
//! [`model_from_spec`] takes the environment as a lookup function, so tests never touch the
//! process environment; [`model_from_env`] reads the real one.

use std::sync::Arc;

use mull_core::LanguageModel;

use crate::anthropic::{AnthropicConfig, AnthropicModel, ANTHROPIC_BASE_URL};
use crate::http::Secret;
use crate::openai::{OpenAiConfig, OpenAiModel, Streaming, OPENAI_BASE_URL};

/// The variable that names the model.
pub const MODEL_VARIABLE: &str = "MULL_MODEL";

/// Why no model could be built from the configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `MULL_MODEL` is unset or empty.
    #[error("{MODEL_VARIABLE} is not set: set it to a model spec such as `openai:gpt-4o-mini`, `anthropic:claude-sonnet-4-5` or `openai-compatible:http://127.0.0.1:8080/v1#model-name`")]
    MissingSpec,
    /// The spec does not have the shape `provider:model`.
    #[error("model spec `{spec}` is invalid: {reason}")]
    InvalidSpec { spec: String, reason: String },
    /// The spec names a provider this build does not know.
    #[error("model spec `{spec}` names unknown provider `{provider}`: use `openai`, `anthropic` or `openai-compatible`")]
    UnknownProvider { spec: String, provider: String },
    /// The provider needs a key that is not set.
    #[error("{provider} needs an API key: set {variable}")]
    MissingKey {
        provider: &'static str,
        variable: &'static str,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the {provider} model: {reason}")]
    Build {
        provider: &'static str,
        reason: String,
    },
}

/// A parsed model spec: which provider, which model, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModelSpec {
    /// `openai:MODEL[?stream=…]`.
    OpenAi {
        model: String,
        /// `?stream=`, when given.
        streaming: Option<Streaming>,
    },
    /// `anthropic:MODEL`.
    Anthropic { model: String },
    /// `openai-compatible:BASE_URL#MODEL[?stream=…]`.
    OpenAiCompatible {
        base_url: String,
        model: String,
        /// `?stream=`, when given.
        streaming: Option<Streaming>,
    },
}

/// What a caller sets over a spec's own options, e.g. from command-line flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModelOverrides {
    /// Whether calls stream; wins over the spec's `?stream=`.
    pub streaming: Option<Streaming>,
}

impl ModelOverrides {
    /// Sets whether calls stream.
    pub fn streaming(mut self, streaming: Option<Streaming>) -> Self {
        self.streaming = streaming;
        self
    }
}

/// Splits `model?options` into the model and its `stream` option; any other option is an error
/// naming the ones there are.
fn model_and_options(
    rest: &str,
    invalid: impl Fn(&str) -> ConfigError,
) -> Result<(String, Option<Streaming>), ConfigError> {
    let (model, options) = match rest.split_once('?') {
        Some((model, options)) => (model, Some(options)),
        None => (rest, None),
    };
    let mut streaming = None;
    for option in options.into_iter().flat_map(|o| o.split('&')) {
        match option.split_once('=') {
            Some(("stream", value)) => {
                streaming = Some(value.parse::<Streaming>().map_err(|e| invalid(&e))?);
            }
            _ => {
                return Err(invalid(&format!(
                    "unknown option `{option}`: the options are `stream=auto|on|off`"
                )))
            }
        }
    }
    Ok((model.trim().to_owned(), streaming))
}

impl ModelSpec {
    /// Parses a spec such as `openai:gpt-4o-mini`.
    pub fn parse(spec: &str) -> Result<Self, ConfigError> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Err(ConfigError::MissingSpec);
        }
        let invalid = |reason: &str| ConfigError::InvalidSpec {
            spec: spec.to_owned(),
            reason: reason.to_owned(),
        };
        let Some((provider, rest)) = spec.split_once(':') else {
            return Err(invalid("expected `provider:model`"));
        };
        match provider {
            "openai" => {
                let (model, streaming) = model_and_options(rest, invalid)?;
                if model.is_empty() {
                    return Err(invalid("the model name after `:` is empty"));
                }
                Ok(ModelSpec::OpenAi { model, streaming })
            }
            "anthropic" => {
                if rest.contains('?') {
                    return Err(invalid(
                        "anthropic takes no options: its Messages API always streams",
                    ));
                }
                if rest.trim().is_empty() {
                    return Err(invalid("the model name after `:` is empty"));
                }
                Ok(ModelSpec::Anthropic {
                    model: rest.trim().to_owned(),
                })
            }
            "openai-compatible" => {
                let Some((base_url, model)) = rest.rsplit_once('#') else {
                    return Err(invalid("expected `openai-compatible:BASE_URL#MODEL`"));
                };
                let url = reqwest::Url::parse(base_url)
                    .map_err(|e| invalid(&format!("base URL `{base_url}`: {e}")))?;
                if !matches!(url.scheme(), "http" | "https") {
                    return Err(invalid(&format!(
                        "base URL `{base_url}` must be http or https"
                    )));
                }
                let (model, streaming) = model_and_options(model, invalid)?;
                if model.is_empty() {
                    return Err(invalid("the model name after `#` is empty"));
                }
                Ok(ModelSpec::OpenAiCompatible {
                    base_url: base_url.to_owned(),
                    model,
                    streaming,
                })
            }
            other => Err(ConfigError::UnknownProvider {
                spec: spec.to_owned(),
                provider: other.to_owned(),
            }),
        }
    }
}

/// Builds the model `spec` names, reading keys and base URLs through `env`.
pub fn model_from_spec(
    spec: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Arc<dyn LanguageModel>, ConfigError> {
    model_from_spec_with(spec, ModelOverrides::default(), env)
}

/// Like [`model_from_spec`], with `overrides` winning over the spec's options. An override the
/// provider cannot honour (streaming off for Anthropic) is an error, not silently dropped.
pub fn model_from_spec_with(
    spec: &str,
    overrides: ModelOverrides,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Arc<dyn LanguageModel>, ConfigError> {
    let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let build = |provider: &'static str| {
        move |e: mull_core::ModelError| ConfigError::Build {
            provider,
            reason: e.message,
        }
    };
    match ModelSpec::parse(spec)? {
        ModelSpec::OpenAi { model, streaming } => {
            let key = var("OPENAI_API_KEY").ok_or(ConfigError::MissingKey {
                provider: "openai",
                variable: "OPENAI_API_KEY",
            })?;
            let mut config = OpenAiConfig::openai(model, Secret::new(key));
            config.base_url = var("OPENAI_BASE_URL").unwrap_or_else(|| OPENAI_BASE_URL.into());
            config.streaming = overrides.streaming.or(streaming).unwrap_or_default();
            Ok(Arc::new(OpenAiModel::new(config).map_err(build("openai"))?))
        }
        ModelSpec::Anthropic { model } => {
            if let Some(streaming) = overrides.streaming.filter(|s| *s != Streaming::On) {
                return Err(ConfigError::InvalidSpec {
                    spec: spec.to_owned(),
                    reason: format!(
                        "streaming `{streaming}` is not available for anthropic: its Messages \
                         API always streams"
                    ),
                });
            }
            let key = var("ANTHROPIC_API_KEY").ok_or(ConfigError::MissingKey {
                provider: "anthropic",
                variable: "ANTHROPIC_API_KEY",
            })?;
            let mut config = AnthropicConfig::new(model, Secret::new(key));
            config.base_url =
                var("ANTHROPIC_BASE_URL").unwrap_or_else(|| ANTHROPIC_BASE_URL.into());
            Ok(Arc::new(
                AnthropicModel::new(config).map_err(build("anthropic"))?,
            ))
        }
        ModelSpec::OpenAiCompatible {
            base_url,
            model,
            streaming,
        } => {
            let mut config = OpenAiConfig::compatible(base_url, model);
            config.streaming = overrides.streaming.or(streaming).unwrap_or_default();
            config.api_key = var("OPENAI_COMPATIBLE_API_KEY").map(Secret::new);
            Ok(Arc::new(
                OpenAiModel::new(config).map_err(build("openai-compatible"))?,
            ))
        }
    }
}

/// Builds the model `MULL_MODEL` names, reading keys from the process environment.
pub fn model_from_env() -> Result<Arc<dyn LanguageModel>, ConfigError> {
    let spec = std::env::var(MODEL_VARIABLE).map_err(|_| ConfigError::MissingSpec)?;
    model_from_spec(&spec, |name| std::env::var(name).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn parses_each_provider() {
        assert_eq!(
            ModelSpec::parse("openai:gpt-4o-mini"),
            Ok(ModelSpec::OpenAi {
                model: "gpt-4o-mini".into(),
                streaming: None
            })
        );
        assert_eq!(
            ModelSpec::parse("anthropic:claude-sonnet-4-5"),
            Ok(ModelSpec::Anthropic {
                model: "claude-sonnet-4-5".into()
            })
        );
        assert_eq!(
            ModelSpec::parse("openai-compatible:http://127.0.0.1:8080/v1#qwen3:8b"),
            Ok(ModelSpec::OpenAiCompatible {
                base_url: "http://127.0.0.1:8080/v1".into(),
                model: "qwen3:8b".into(),
                streaming: None
            })
        );
    }

    #[test]
    fn the_stream_option_is_read_after_the_model() {
        assert_eq!(
            ModelSpec::parse("openai-compatible:http://127.0.0.1:8080/v1?x=1#qwen3:8b?stream=off"),
            Ok(ModelSpec::OpenAiCompatible {
                base_url: "http://127.0.0.1:8080/v1?x=1".into(),
                model: "qwen3:8b".into(),
                streaming: Some(Streaming::Off)
            })
        );
        assert_eq!(
            ModelSpec::parse("openai:gpt-4o-mini?stream=on"),
            Ok(ModelSpec::OpenAi {
                model: "gpt-4o-mini".into(),
                streaming: Some(Streaming::On)
            })
        );
        let err = ModelSpec::parse("openai:gpt-4o-mini?stream=sometimes").err();
        assert!(
            err.as_ref()
                .is_some_and(|e| e.to_string().contains("not one of `auto`, `on`, `off`")),
            "{err:?}"
        );
        let err = ModelSpec::parse("openai:gpt-4o-mini?temperature=0").err();
        assert!(
            err.as_ref()
                .is_some_and(|e| e.to_string().contains("unknown option `temperature=0`")),
            "{err:?}"
        );
        assert!(matches!(
            ModelSpec::parse("anthropic:claude?stream=off"),
            Err(ConfigError::InvalidSpec { .. })
        ));
        let off = ModelOverrides::default().streaming(Some(Streaming::Off));
        assert!(matches!(
            model_from_spec_with("anthropic:claude", off, env(&[("ANTHROPIC_API_KEY", "k")])),
            Err(ConfigError::InvalidSpec { .. })
        ));
    }

    #[test]
    fn rejects_bad_specs_with_reasons() {
        assert_eq!(ModelSpec::parse("  "), Err(ConfigError::MissingSpec));
        assert!(matches!(
            ModelSpec::parse("gpt-4o"),
            Err(ConfigError::InvalidSpec { .. })
        ));
        assert!(matches!(
            ModelSpec::parse("openai:"),
            Err(ConfigError::InvalidSpec { .. })
        ));
        assert!(matches!(
            ModelSpec::parse("openai-compatible:http://127.0.0.1:8080/v1"),
            Err(ConfigError::InvalidSpec { .. })
        ));
        assert!(matches!(
            ModelSpec::parse("openai-compatible:ftp://host/v1#m"),
            Err(ConfigError::InvalidSpec { .. })
        ));
        assert_eq!(
            ModelSpec::parse("gemini:flash"),
            Err(ConfigError::UnknownProvider {
                spec: "gemini:flash".into(),
                provider: "gemini".into()
            })
        );
    }

    #[test]
    fn missing_keys_name_the_variable() {
        let err = model_from_spec("openai:gpt-4o-mini", env(&[])).err();
        assert_eq!(
            err.map(|e| e.to_string()),
            Some("openai needs an API key: set OPENAI_API_KEY".into())
        );
        let err = model_from_spec("anthropic:claude", env(&[("ANTHROPIC_API_KEY", " ")])).err();
        assert_eq!(
            err,
            Some(ConfigError::MissingKey {
                provider: "anthropic",
                variable: "ANTHROPIC_API_KEY"
            })
        );
    }

    #[test]
    fn builds_models_that_report_their_names() {
        let model = model_from_spec("openai:gpt-4o-mini", env(&[("OPENAI_API_KEY", "sk-x")]))
            .expect("openai builds");
        assert_eq!(
            (model.provider(), model.model_id()),
            ("openai", "gpt-4o-mini")
        );
        let model = model_from_spec(
            "anthropic:claude-sonnet-4-5",
            env(&[("ANTHROPIC_API_KEY", "k")]),
        )
        .expect("anthropic builds");
        assert_eq!(model.provider(), "anthropic");
        let model = model_from_spec("openai-compatible:http://127.0.0.1:1/v1#m", env(&[]))
            .expect("compatible builds without a key");
        assert_eq!(
            (model.provider(), model.model_id()),
            ("openai-compatible", "m")
        );
    }
}
