//! The binding against the real library and an oracle fixture. The ctest wrapper
//! (bindings/CMakeLists.txt) passes the paths:
//!
//!   COLIBRI_LIB         the built libcolibri.so.1
//!   COLIBRI_MODEL_TOOL  the built colibri-model (converts the oracle fixture)
//!   COLIBRI_ORACLE_DIR  tests/fixtures/oracle/mixtral_gqa (default: found from the crate)
//!   COLIBRI_TEST_TMPDIR where to write the converted image (default: cargo's CARGO_TARGET_TMPDIR)
//!
//! Without COLIBRI_LIB / COLIBRI_MODEL_TOOL every test here returns early with a message.
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread;

use colibri::{
    ChatMessage, ChatOptions, DetokenizeFlags, Device, EngineOptions, Error, FinishReason, GenerateOptions, Isa, Library, LogLevel, Model, ModelOptions,
    RequestOptions, SamplerOptions, Session, SessionOptions, Status, TokenizeFlags,
};

struct Fixture {
    lib: Arc<Library>,
    image: PathBuf,
    dir: PathBuf,
    prompt_text: String,
    input_ids: Vec<i32>,
    greedy: Vec<i32>,
}

/// The value of `"key": [ints]` in a small, regular JSON file (no JSON crate: no dependencies).
fn json_ints(json: &str, key: &str) -> Vec<i32> {
    let start = json.find(&format!("\"{key}\"")).unwrap_or_else(|| panic!("no {key} in oracle.json"));
    let open = start + json[start..].find('[').unwrap();
    let close = open + json[open..].find(']').unwrap();
    json[open + 1..close].split(',').map(|v| v.trim().parse().unwrap()).collect()
}

/// The value of `"key": "text"` (handles \" \\ \n \t \uXXXX escapes of BMP characters).
fn json_string(json: &str, key: &str) -> String {
    let start = json.find(&format!("\"{key}\"")).unwrap() + key.len() + 2;
    let open = start + json[start..].find('"').unwrap() + 1;
    let mut out = String::new();
    let mut chars = json[open..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => break,
            '\\' => match chars.next().unwrap() {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'u' => {
                    let hex: String = chars.by_ref().take(4).collect();
                    out.push(char::from_u32(u32::from_str_radix(&hex, 16).unwrap()).unwrap_or('\u{FFFD}'));
                }
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    out
}

// Built once (the first test to ask converts the image) and shared by every test thread.
// A Mutex rather than OnceLock: const Mutex::new is in Rust 1.63 (Debian 12), OnceLock in 1.70.
fn fixture() -> Option<&'static Fixture> {
    static FIXTURE: Mutex<Option<Option<&'static Fixture>>> = Mutex::new(None);
    let mut slot = FIXTURE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    *slot.get_or_insert_with(|| make_fixture().map(|f| &*Box::leak(Box::new(f))))
}

fn make_fixture() -> Option<Fixture> {
    let (lib, tool) = match (std::env::var_os("COLIBRI_LIB"), std::env::var_os("COLIBRI_MODEL_TOOL")) {
        (Some(lib), Some(tool)) => (lib, tool),
        _ => {
            eprintln!("skipped: COLIBRI_LIB and COLIBRI_MODEL_TOOL are not set (run through ctest: bindings/CMakeLists.txt)");
            return None;
        }
    };
    let oracle = std::env::var_os("COLIBRI_ORACLE_DIR").map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/oracle/mixtral_gqa")
    });
    let json = std::fs::read_to_string(oracle.join("oracle.json")).expect("oracle.json");
    let dir = std::env::var_os("COLIBRI_TEST_TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")))
        .join(format!("colibri-rust-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let image = dir.join("mixtral_gqa.colibri");
    let out = Command::new(&tool)
        .arg("convert")
        .arg(&oracle)
        .arg("-o")
        .arg(&image)
        .arg("--force")
        .output()
        .expect("run colibri-model");
    assert!(out.status.success(), "convert failed: {}", String::from_utf8_lossy(&out.stderr));
    let lib = Library::load(Some(Path::new(&lib))).expect("load libcolibri");
    Some(Fixture {
        lib,
        image,
        dir,
        prompt_text: json_string(&json, "prompt_text"),
        input_ids: json_ints(&json, "input_ids"),
        greedy: json_ints(&json, "greedy_tokens"),
    })
}

fn open(fx: &Fixture) -> Model {
    Model::open_with(&fx.lib, &fx.image, &ModelOptions { threads: Some(1), ..Default::default() }).expect("open")
}

fn session(model: &Model) -> Session {
    model
        .session(&SessionOptions { context_length: Some(64), threads: Some(1), ..Default::default() })
        .expect("session")
}

fn greedy_options(fx: &Fixture) -> GenerateOptions {
    GenerateOptions {
        max_tokens: Some(fx.greedy.len() as u32),
        ignore_eos: true,
        sampler: Some(SamplerOptions::greedy()),
        ..Default::default()
    }
}

fn argmax(row: &[f32]) -> i32 {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    best as i32
}

/// Streams to the end: (tokens, text).
fn stream_all(session: &mut Session, prompt: &[i32], options: &GenerateOptions) -> (Vec<i32>, String) {
    let mut stream = session.stream(prompt, options).expect("stream");
    let mut text = String::new();
    while let Some(piece) = stream.next_piece().expect("next") {
        text.push_str(piece);
    }
    (stream.tokens().expect("tokens"), text)
}

fn generate_text(session: &mut Session, prompt: &[i32], options: &GenerateOptions) -> String {
    let mut text = String::new();
    session
        .generate(prompt, options, |piece| {
            text.push_str(piece);
            ControlFlow::Continue(())
        })
        .expect("generate");
    text
}

#[test]
fn library_loading() {
    let fx = match fixture() {
        Some(fx) => fx,
        None => return,
    };
    assert_eq!(fx.lib.abi_version(), colibri::ABI_VERSION);
    assert!(!fx.lib.version().is_empty());
    let again = Library::load(fx.lib.path()).unwrap();
    assert!(Arc::ptr_eq(&again, &fx.lib));
    for code in -12..=1 {
        assert_eq!(fx.lib.status_string(Status(code)), Status(code).name(), "status {code}");
    }
    let e = Library::load(Some(Path::new("/nonexistent/libcolibri.so.1"))).unwrap_err();
    assert!(e.status() == Status::IO && e.message().contains("cannot load"), "{e}");
    let e = Library::load(Some(Path::new("libm.so.6"))).unwrap_err();
    assert!(e.status() == Status::UNSUPPORTED && e.message().contains("not libcolibri"), "{e}");
}

#[test]
fn model_info_and_tokenizer() {
    let fx = match fixture() {
        Some(fx) => fx,
        None => return,
    };
    let model = open(fx);
    let info = model.info();
    assert_eq!((info.family.as_str(), info.vocab_size, info.top_k, info.expert_count), ("mixtral", 512, 2, 8));
    assert!(info.has_tokenizer);
    // gpt-oss's fields, for a Mixtral: none of them.
    assert_eq!((info.sliding_window, info.sliding_layer_count), (0, 0));
    assert!(!info.attention_sinks && !info.attention_output_bias && !info.router_bias && !info.expert_bias);
    assert_eq!((info.expert_activation.as_str(), info.swiglu_limit, info.swiglu_alpha), ("silu", 0.0, 0.0));
    // Multi-head latent attention's fields, for a Mixtral: grouped-query attention, no ranks;
    // the cache keeps k and v of 2 KV heads × 16 values per layer.
    assert_eq!((info.attention.as_str(), info.q_lora_rank, info.kv_lora_rank, info.v_head_dim), ("gqa", 0, 0, 0));
    assert!(!info.rope_interleave && info.mtp_layer_count == 0);
    assert_eq!(info.kv_cache_bytes_per_token, 2 * 2 * 2 * 16 * 4);
    assert_eq!(info.attention_scale, 0.25);
    let tensors = model.tensors().unwrap();
    assert_eq!(tensors.len(), info.tensor_count);
    assert_eq!(model.find_tensor(&tensors[1].name).unwrap(), 1);
    assert_eq!(model.find_tensor("no.such.tensor").unwrap_err().status(), Status::INVALID_ARGUMENT);
    let meta = model.metadata().unwrap();
    assert!(meta.starts_with(b"{"));
    let eos = model.eos_tokens().unwrap();
    assert_eq!(eos.len(), info.eos_token_count);
    // The oracle's input ids are BOS + the prompt text's ids (+ possibly more).
    let ids = model.tokenize(&fx.prompt_text, TokenizeFlags::ADD_SPECIAL).unwrap();
    assert!(ids.len() <= fx.input_ids.len() && ids[..] == fx.input_ids[..ids.len()], "{ids:?}");
    assert_eq!(model.detokenize(&ids, DetokenizeFlags::SKIP_SPECIAL).unwrap(), fx.prompt_text);
    assert!(!model.token_text(ids[0]).unwrap().is_empty());
    let e = model.detokenize(&[info.vocab_size as i32], DetokenizeFlags::NONE).unwrap_err();
    assert_eq!(e.status(), Status::INVALID_ARGUMENT);
    assert!(!e.message().is_empty());
}

/// Prefill the oracle's input ids, decode greedily: the expected tokens exactly.
#[test]
fn oracle_greedy_prefill_decode() {
    let fx = match fixture() {
        Some(fx) => fx,
        None => return,
    };
    let model = open(fx);
    let mut s = session(&model);
    s.prefill(0, &fx.input_ids).unwrap();
    for (i, &want) in fx.greedy.iter().enumerate() {
        let got = argmax(s.logits(0).unwrap());
        assert_eq!(got, want, "greedy token {i}");
        s.decode(0, want).unwrap();
    }
    assert_eq!(s.sequence_length(0).unwrap() as usize, fx.input_ids.len() + fx.greedy.len());
    let stats = s.stats().unwrap();
    assert!(stats.forward_calls > 0 && stats.stages[0].name == "embedding");
    assert_eq!(s.info().unwrap().context_length, 64);
}

#[test]
fn load_into_memory_gives_the_mapped_bits() {
    let fx = match fixture() {
        Some(fx) => fx,
        None => return,
    };
    let mapped = open(fx);
    let options = ModelOptions { threads: Some(1), load_into_memory: true, ..Default::default() };
    let loaded = Model::open_with(&fx.lib, &fx.image, &options).expect("open loaded");
    let (mut a, mut b) = (session(&mapped), session(&loaded));
    a.prefill(0, &fx.input_ids).unwrap();
    b.prefill(0, &fx.input_ids).unwrap();
    let (la, lb) = (a.logits(0).unwrap().to_vec(), b.logits(0).unwrap());
    assert_eq!(la.len(), lb.len());
    assert!(la.iter().zip(lb).all(|(x, y)| x.to_bits() == y.to_bits()), "loaded logits differ from mapped");
}

// A CUDA session on a machine without a device is refused with "no CUDA device: ..."; where a
// device is present the case returns early (scripts/gpu-check.sh tests the device).
#[test]
fn cuda_without_a_device_is_unsupported() {
    let fx = match fixture() {
        Some(fx) => fx,
        None => return,
    };
    let model = open(fx);
    let options = SessionOptions { context_length: Some(64), device: Some(Device::Cuda(0)), ..Default::default() };
    match model.session(&options) {
        Ok(_) => eprintln!("a CUDA device is present: skipped"),
        Err(e) => {
            assert_eq!(e.status(), Status::UNSUPPORTED, "{e}");
            assert!(e.message().starts_with("no CUDA device: "), "{e}");
        }
    }
}

#[test]
fn max_isa_caps_the_kernels() {
    let fx = match fixture() {
        Some(fx) => fx,
        None => return,
    };
    let model = open(fx);
    let run = |max_isa: Option<Isa>, force_scalar: bool| {
        let options = SessionOptions { context_length: Some(64), threads: Some(2), max_isa, force_scalar, ..Default::default() };
        let mut s = model.session(&options).expect("session");
        s.prefill(0, &fx.input_ids).unwrap();
        (s.info().unwrap().backend, s.logits(0).unwrap().to_vec())
    };
    let level = |backend: &str| match backend {
        "cpu-scalar" => 1,
        "cpu-avx2" => 2,
        "cpu-avx512" => 3,
        other => panic!("unknown backend {other}"),
    };
    let (best_name, best) = run(None, false);
    for (isa, cap) in [(Isa::Scalar, 1), (Isa::Avx2, 2), (Isa::Avx512, 3)] {
        let (name, logits) = run(Some(isa), false);
        assert_eq!(level(&name), cap.min(level(&best_name)), "{isa:?}: backend {name}");
        let diff = logits.iter().zip(&best).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(diff < 1e-4, "{isa:?}: logits differ from {best_name} by {diff}");
    }
    let (scalar_name, scalar) = run(Some(Isa::Scalar), false);
    let (forced_name, forced) = run(None, true);
    assert!(scalar_name == "cpu-scalar" && forced_name == "cpu-scalar");
    assert!(scalar.iter().zip(&forced).all(|(a, b)| a.to_bits() == b.to_bits()), "Isa::Scalar differs from force_scalar");
}

#[test]
fn generate_and_stream_greedy() {
    let fx = match fixture() {
        Some(fx) => fx,
        None => return,
    };
    let model = open(fx);
    let mut s = session(&model);
    let options = greedy_options(fx);
    let (tokens, streamed) = stream_all(&mut s, &fx.input_ids, &options);
    assert_eq!(tokens, fx.greedy);
    let mut text = String::new();
    let result = s
        .generate(&fx.input_ids, &options, |piece| {
            text.push_str(piece);
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(result.finish_reason, colibri::FinishReason::Length);
    assert_eq!(result.generated_tokens as usize, fx.greedy.len());
    assert_eq!(result.prompt_tokens as usize, fx.input_ids.len());
    assert!(!streamed.is_empty());
    assert_eq!(text, streamed);
    assert_eq!(model.detokenize(&fx.greedy, DetokenizeFlags::SKIP_SPECIAL).unwrap(), streamed);
    // The iterator form gives the same pieces.
    let pieces: Vec<String> = s.stream(&fx.input_ids, &options).unwrap().collect::<Result<_, Error>>().unwrap();
    assert_eq!(pieces.concat(), streamed);
    // The text form tokenizes with special tokens.
    let ids = model.tokenize(&fx.prompt_text, TokenizeFlags::ADD_SPECIAL).unwrap();
    let result = s.generate_text(&fx.prompt_text, &options, |_| ControlFlow::Continue(())).unwrap();
    assert_eq!(result.prompt_tokens as usize, ids.len());
}

#[test]
fn cancellation() {
    let fx = match fixture() {
        Some(fx) => fx,
        None => return,
    };
    let model = open(fx);
    let mut s = session(&model);
    let options = greedy_options(fx);
    // The callback stops after two pieces: not an error.
    let mut pieces = 0;
    let result = s
        .generate(&fx.input_ids, &options, |_| {
            pieces += 1;
            if pieces == 2 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
    assert_eq!(pieces, 2);
    assert_eq!(result.finish_reason, colibri::FinishReason::Cancelled);
    assert!((result.generated_tokens as usize) < fx.greedy.len());
    // A stream dropped after two pieces.
    {
        let mut stream = s.stream(&fx.input_ids, &options).unwrap();
        assert!(stream.next_piece().unwrap().is_some());
        assert!(stream.next_piece().unwrap().is_some());
        assert_eq!(stream.result().unwrap().finish_reason, colibri::FinishReason::None);
        let tokens = stream.tokens().unwrap();
        assert!(tokens.len() >= 2 && tokens.len() < fx.greedy.len(), "{tokens:?}");
    }
    // The session works again.
    assert_eq!(stream_all(&mut s, &fx.input_ids, &options).0, fx.greedy);
}

#[test]
fn panic_in_callback_is_an_error() {
    let fx = match fixture() {
        Some(fx) => fx,
        None => return,
    };
    let model = open(fx);
    let mut s = session(&model);
    let options = greedy_options(fx);
    let e = s.generate(&fx.input_ids, &options, |_| panic!("boom")).unwrap_err();
    assert_eq!(e.status(), Status::CALLBACK);
    assert!(e.message().contains("boom"), "{e}");
    assert_eq!(stream_all(&mut s, &fx.input_ids, &options).0, fx.greedy);
}

#[test]
fn broken_files() {
    let fx = match fixture() {
        Some(fx) => fx,
        None => return,
    };
    let logged = Arc::new(Mutex::new(String::new()));
    let sink = logged.clone();
    fx.lib
        .set_log_handler(
            LogLevel::Debug,
            Some(Box::new(move |_, message| {
                let mut s = sink.lock().unwrap();
                s.push_str(message);
                s.push('\n');
            })),
        )
        .unwrap();
    let gguf_path = fx.dir.join("broken.colibri");
    let mut gguf = vec![0u8; 64];
    gguf[..17].copy_from_slice(&[b'G', b'G', b'U', b'F', 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2]);
    std::fs::write(&gguf_path, &gguf).unwrap();
    let e = Model::open_with(&fx.lib, &gguf_path, &ModelOptions::default()).unwrap_err();
    assert_eq!(e.status(), Status::NOT_AN_IMAGE);
    assert!(e.message().contains("GGUF"), "{e}");
    eprintln!("broken file: {e}");

    let raw = std::fs::read(&fx.image).unwrap();
    let truncated = fx.dir.join("truncated.colibri");
    std::fs::write(&truncated, &raw[..raw.len() / 2]).unwrap();
    let e = Model::open_with(&fx.lib, &truncated, &ModelOptions::default()).unwrap_err();
    assert_eq!(e.status(), Status::CORRUPT, "{e}");
    let e = Model::open_with(&fx.lib, fx.dir.join("missing.colibri"), &ModelOptions::default()).unwrap_err();
    assert_eq!(e.status(), Status::IO, "{e}");
    fx.lib.set_log_handler(LogLevel::Off, None).unwrap();
    assert!(logged.lock().unwrap().contains("GGUF"), "the debug log does not mention the failure");

    // Bad options: the library's status and message.
    let model = open(fx);
    let e = model.session(&SessionOptions { max_sequences: Some(1 << 20), ..Default::default() }).unwrap_err();
    assert!(e.status() == Status::INVALID_ARGUMENT && e.message().contains("max_sequences"), "{e}");
}

/// 4 threads, 4 sessions, one model: the results equal the sequential ones.
#[test]
fn concurrent_sessions_equal_sequential() {
    let fx = match fixture() {
        Some(fx) => fx,
        None => return,
    };
    let model = open(fx);
    let options = greedy_options(fx);
    // Prefixes whose greedy continuations decode cleanly as a stream with this random-weight
    // fixture (see the Go test for why).
    let inp = &fx.input_ids;
    let prompts: Vec<Vec<i32>> = vec![inp.clone(), inp[..7].to_vec(), inp[..9].to_vec(), inp[..12].to_vec()];
    let mut s = session(&model);
    let sequential: Vec<(Vec<i32>, String)> = prompts
        .iter()
        .map(|p| (stream_all(&mut s, p, &options).0, generate_text(&mut s, p, &options)))
        .collect();
    assert_eq!(sequential[0].0, fx.greedy);
    drop(s);
    for round in 0..2 {
        let handles: Vec<_> = prompts
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, prompt)| {
                let model = model.clone(); // Model: Send + Sync, shared
                let options = options.clone();
                thread::spawn(move || {
                    let mut s = session(&model);
                    if (i + round) % 2 == 0 {
                        (stream_all(&mut s, &prompt, &options).0, String::new())
                    } else {
                        (Vec::new(), generate_text(&mut s, &prompt, &options))
                    }
                })
            })
            .collect();
        for (i, h) in handles.into_iter().enumerate() {
            let (tokens, text) = h.join().unwrap();
            if (i + round) % 2 == 0 {
                assert_eq!(tokens, sequential[i].0, "round {round} prompt {i}");
            } else {
                assert_eq!(text, sequential[i].1, "round {round} prompt {i}");
            }
        }
    }
    // A session moves to another thread (Send) and keeps the model alive after the last Model
    // handle is gone.
    let mut s = session(&model);
    drop(model);
    let greedy = fx.greedy.clone();
    let input = fx.input_ids.clone();
    thread::spawn(move || assert_eq!(stream_all(&mut s, &input, &options).0, greedy)).join().unwrap();
}

#[test]
fn chat_batch_moe() {
    let fx = match fixture() {
        Some(fx) => fx,
        None => return,
    };
    let model = open(fx);
    // The chat template (expected text from transformers, tests/fixtures/tokenizer).
    let text = model.chat_render(&[colibri::ChatMessage::new("user", "Hello! Who are you?")], &Default::default()).unwrap();
    assert_eq!(text, "<s>[INST] Hello! Who are you? [/INST]");
    let broken = colibri::ChatOptions { template: Some("{% for %}".into()), ..Default::default() };
    assert!(model.chat_render(&[colibri::ChatMessage::new("user", "x")], &broken).is_err());

    // Two sequences decoded in one batch: both continue the oracle's greedy path.
    let mut s = model
        .session(&SessionOptions { context_length: Some(64), max_sequences: Some(2), threads: Some(1), ..Default::default() })
        .unwrap();
    for seq in 0..2 {
        s.prefill(seq, &fx.input_ids).unwrap();
    }
    let g = &fx.greedy;
    let entry = |sequence| colibri::BatchEntry { sequence, position: None, token: g[0], want_logits: true };
    s.batch(&[entry(0), entry(1)]).unwrap();
    assert_eq!(s.logit_rows().unwrap(), 2);
    for row in 0..2 {
        assert_eq!(argmax(s.logits(row).unwrap()), g[1], "row {row}");
    }
    assert_eq!(s.logits(2).unwrap_err().status(), Status::INVALID_ARGUMENT);

    // The MoE block of layer 0 on caller data, with the router and with a static routing table.
    let info = model.info().clone();
    let hidden: Vec<f32> = (0..2 * info.hidden_size).map(|i| (i % 7) as f32 * 0.01).collect();
    assert_eq!(s.moe_layer(0, &hidden, None).unwrap().len(), hidden.len());
    let mut experts: Vec<i32> = (0..2 * info.top_k).map(|i| (i % info.expert_count) as i32).collect();
    let weights = vec![0.5f32; 2 * info.top_k];
    s.moe_layer(0, &hidden, Some((&experts, &weights))).unwrap();
    experts[0] = info.expert_count as i32;
    assert_eq!(s.moe_layer(0, &hidden, Some((&experts, &weights))).unwrap_err().status(), Status::INVALID_ARGUMENT);
}

fn engine(model: &Model, max_sequences: u32, queue: u32) -> colibri::Engine {
    engine_with_context(model, max_sequences, queue, 64)
}

fn engine_with_context(model: &Model, max_sequences: u32, queue: u32, context: u32) -> colibri::Engine {
    model
        .engine(&EngineOptions {
            max_sequences: Some(max_sequences),
            context_length: Some(context),
            step_tokens: Some(16),
            queue_capacity: Some(queue),
            session: SessionOptions { threads: Some(2), ..Default::default() },
            ..Default::default()
        })
        .expect("engine")
}

/// Requests submitted from several threads at once each equal a lone session's generation
/// with the same seed; greedy equals the oracle.
#[test]
fn engine_requests_from_threads_equal_sessions() {
    let fx = match fixture() {
        Some(fx) => fx,
        None => return,
    };
    let model = open(fx);
    let engine = engine(&model, 4, 16);
    let mut s = session(&model);
    let mut expected = Vec::new();
    for i in 0..6u32 {
        let sampler = if i == 0 {
            SamplerOptions::greedy()
        } else {
            SamplerOptions { temperature: Some(1.0), seed: Some(500 + u64::from(i)), ..Default::default() }
        };
        let max = if i == 0 { fx.greedy.len() as u32 } else { 5 + i };
        let g = GenerateOptions { max_tokens: Some(max), ignore_eos: true, sampler: Some(sampler.clone()), ..Default::default() };
        let (tokens, text) = stream_all(&mut s, &fx.input_ids, &g);
        let r = RequestOptions { max_tokens: Some(max), ignore_eos: true, sampler: Some(sampler), ..Default::default() };
        expected.push((r, tokens, text));
    }
    assert_eq!(expected[0].1, fx.greedy);
    // Every thread submits at the same moment, so that the engine has them to batch (a thread
    // started late could find the others' requests already finished on a loaded machine).
    let start = Arc::new(std::sync::Barrier::new(expected.len()));
    let handles: Vec<_> = expected
        .into_iter()
        .map(|(options, tokens, text)| {
            let engine = engine.clone();
            let prompt = fx.input_ids.clone();
            let start = start.clone();
            thread::spawn(move || {
                start.wait();
                let mut request = engine.submit(&prompt, &options).expect("submit");
                let got: String = request.by_ref().map(|p| p.expect("piece")).collect();
                assert_eq!(got, text);
                assert_eq!(request.tokens().unwrap(), tokens);
                let result = request.result().unwrap();
                assert_eq!(result.finish_reason, FinishReason::Length);
                assert_eq!(result.generated_tokens as usize, tokens.len());
            })
        })
        .collect();
    for h in handles {
        h.join().expect("request thread");
    }
    let stats = engine.stats().unwrap();
    assert_eq!(stats.submitted, 6);
    assert!(stats.max_batch_sequences >= 2 && stats.max_batch_sequences <= 4, "{stats:?}");
}

/// Busy, cancellation from another thread, timeouts, PENDING, the prefix cache, and requests
/// that outlive the engine.
#[test]
fn engine_busy_cancel_timeout_prefix() {
    let fx = match fixture() {
        Some(fx) => fx,
        None => return,
    };
    let model = open(fx);
    // One slot, a context long enough that a (the slot holder) runs for many milliseconds: b's
    // cancellation from another thread lands while b still waits, even on a loaded machine.
    let engine = engine_with_context(&model, 1, 1, 1024);
    const A_TOKENS: u32 = 900;
    let long = RequestOptions { max_tokens: Some(A_TOKENS), ignore_eos: true, ..Default::default() };
    let mut a = engine.submit(&fx.input_ids, &long).unwrap();
    assert!(a.next().unwrap().is_ok()); // a holds the only slot
    let mut b = engine.submit(&fx.input_ids, &long).unwrap(); // waits
    let busy = engine.submit(&fx.input_ids, &long).unwrap_err();
    assert_eq!(busy.status(), Status::BUSY);
    let canceller = b.canceller();
    thread::spawn(move || canceller.cancel().unwrap()).join().unwrap();
    // a holds the only slot while it runs: if it still runs after the cancel returned, b was
    // cancelled while queued (no token). Otherwise (a machine so loaded that a's 900 tokens
    // finished first) b may have had the slot before the cancel landed.
    let a_was_running = a.result().unwrap().finish_reason == FinishReason::None;
    assert!(b.by_ref().all(|p| p.is_ok()));
    let rb = b.result().unwrap();
    if a_was_running {
        assert_eq!(rb.finish_reason, FinishReason::Cancelled, "{rb:?}");
        assert_eq!(rb.generated_tokens, 0, "{rb:?}");
    } else {
        assert!(matches!(rb.finish_reason, FinishReason::Cancelled | FinishReason::Length), "{rb:?}");
    }
    assert!(a.by_ref().all(|p| p.is_ok()));
    assert_eq!(a.result().unwrap().generated_tokens, u64::from(A_TOKENS));
    // Second turn over the first turn's history: its full blocks come from the prefix cache.
    let mut history = fx.input_ids.clone();
    history.extend_from_slice(&a.tokens().unwrap()[..20]);
    let mut c = engine.submit(&history, &RequestOptions { max_tokens: Some(3), ..Default::default() }).unwrap();
    assert!(c.by_ref().all(|p| p.is_ok()));
    let rc = c.result().unwrap();
    assert!(rc.prefix_hit_tokens >= 16 && rc.prefix_hit_tokens % 16 == 0, "{rc:?}");
    // A timeout (1 us: before it can finish) ends the request with Deadline; a zero wait may be
    // PENDING.
    let timed = RequestOptions {
        max_tokens: Some(100_000),
        ignore_eos: true,
        timeout: Some(std::time::Duration::from_micros(1)),
        ..Default::default()
    };
    let mut d = engine.submit(&fx.input_ids, &timed).unwrap();
    match d.next_piece(Some(std::time::Duration::ZERO)) {
        Ok(_) => {}
        Err(e) => assert_eq!(e.status(), Status::PENDING),
    }
    assert!(d.by_ref().all(|p| p.is_ok()));
    assert_eq!(d.result().unwrap().finish_reason, FinishReason::Deadline);
    // Dropping the engine cancels what runs; the request stays readable.
    let mut e = engine.submit(&fx.input_ids, &long).unwrap();
    drop(engine);
    assert!(e.by_ref().all(|p| p.is_ok()));
    let re = e.result().unwrap();
    assert!(matches!(re.finish_reason, FinishReason::Cancelled | FinishReason::Length), "{re:?}");
}

/// Logprobs: greedy picks the most likely token of each step, the values are log_softmax of a
/// session's raw logits on the same tokens, and recording them changes no token.
#[test]
fn engine_logprobs_are_raw_and_change_nothing() {
    let fx = match fixture() {
        Some(fx) => fx,
        None => return,
    };
    let model = open(fx);
    let engine = engine(&model, 3, 8);
    let greedy = RequestOptions {
        max_tokens: Some(6),
        ignore_eos: true,
        sampler: Some(SamplerOptions::greedy()),
        top_logprobs: 5,
        ..Default::default()
    };
    let sampled = SamplerOptions { temperature: Some(1.2), seed: Some(31), presence_penalty: Some(1.0), ..Default::default() };
    let plain = RequestOptions { max_tokens: Some(10), ignore_eos: true, sampler: Some(sampled), ..Default::default() };
    let with = RequestOptions { logprobs: true, ..plain.clone() };
    let mut g = engine.submit(&fx.input_ids, &greedy).unwrap();
    let mut a = engine.submit(&fx.input_ids, &with).unwrap();
    let mut b = engine.submit(&fx.input_ids, &plain).unwrap();
    for r in [&mut g, &mut a, &mut b] {
        assert!(r.by_ref().all(|p| p.is_ok()));
    }
    assert_eq!(a.tokens().unwrap(), b.tokens().unwrap());
    let tokens = g.tokens().unwrap();
    assert_eq!(tokens, fx.greedy[..6]);
    let mut s = session(&model);
    s.prefill(0, &fx.input_ids).unwrap();
    for (i, &token) in tokens.iter().enumerate() {
        let logits = s.logits(0).unwrap();
        let max = logits.iter().fold(f64::MIN, |m, &x| m.max(f64::from(x)));
        let sum: f64 = logits.iter().map(|&x| (f64::from(x) - max).exp()).sum();
        let want = f64::from(logits[token as usize]) - max - sum.ln();
        let (chosen, top) = g.logprobs(i).unwrap();
        assert_eq!(chosen.token, token);
        assert!((f64::from(chosen.logprob) - want).abs() < 1e-4, "{chosen:?} vs {want}");
        assert_eq!(top.len(), 5);
        assert_eq!(top[0], chosen);
        assert!(top.windows(2).all(|w| w[0].logprob >= w[1].logprob), "{top:?}");
        s.decode(0, token).unwrap();
    }
    assert!(a.logprobs(0).unwrap().1.is_empty());
    assert_eq!(b.logprobs(0).unwrap_err().status(), Status::BAD_STATE);
    assert_eq!(g.logprobs(tokens.len()).unwrap_err().status(), Status::INVALID_ARGUMENT);
    let too_many = RequestOptions { top_logprobs: colibri::MAX_TOP_LOGPROBS + 1, ..Default::default() };
    assert_eq!(engine.submit(&fx.input_ids, &too_many).unwrap_err().status(), Status::INVALID_ARGUMENT);
}

/// submit_chat is chat_render + tokenize(PARSE_SPECIAL) + submit in one call.
#[test]
fn engine_submit_chat_equals_rendering_by_hand() {
    let fx = match fixture() {
        Some(fx) => fx,
        None => return,
    };
    let model = open(fx);
    let engine = engine(&model, 2, 8);
    let messages = vec![
        ChatMessage { role: "system".into(), content: "Be brief.".into() },
        ChatMessage { role: "user".into(), content: "The test is".into() },
    ];
    let chat = ChatOptions::default();
    let text = model.chat_render(&messages, &chat).unwrap();
    let ids = model.tokenize(&text, TokenizeFlags::PARSE_SPECIAL).unwrap();
    let options = RequestOptions { max_tokens: Some(5), ignore_eos: true, sampler: Some(SamplerOptions::greedy()), ..Default::default() };
    let mut by_hand = engine.submit(&ids, &options).unwrap();
    let mut rendered = engine.submit_chat(&messages, &chat, &options).unwrap();
    let a: String = by_hand.by_ref().map(|p| p.unwrap()).collect();
    let b: String = rendered.by_ref().map(|p| p.unwrap()).collect();
    assert_eq!(a, b);
    assert_eq!(by_hand.tokens().unwrap(), rendered.tokens().unwrap());
    assert_eq!(rendered.result().unwrap().prompt_tokens as usize, ids.len());
    let raising = ChatOptions { template: Some("{{ raise_exception('no chat') }}".into()), ..Default::default() };
    assert_eq!(engine.submit_chat(&messages, &raising, &options).unwrap_err().status(), Status::INVALID_ARGUMENT);
}
