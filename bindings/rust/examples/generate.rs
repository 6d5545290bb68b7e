//! `cargo run --example generate -- [--library PATH] IMAGE [PROMPT] [MAX_TOKENS]`: greedy
//! generation printed as it streams.
use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut library = None;
    if args.first().map(String::as_str) == Some("--library") && args.len() >= 2 {
        library = Some(PathBuf::from(args.remove(1)));
        args.remove(0);
    }
    let image = match args.first().cloned() {
        Some(image) => image,
        None => {
            eprintln!("usage: generate [--library PATH] IMAGE [PROMPT] [MAX_TOKENS]");
            std::process::exit(2);
        }
    };
    let prompt = args.get(1).cloned().unwrap_or_else(|| "Once upon a time".to_string());
    let max_tokens = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(64);
    if let Err(e) = run(library, &image, &prompt, max_tokens) {
        eprintln!("{e}");
        std::process::exit(1);
    }
}

fn run(library: Option<PathBuf>, image: &str, prompt: &str, max_tokens: u32) -> colibri::Result<()> {
    let lib = colibri::Library::load(library.as_deref())?;
    let model = colibri::Model::open_with(&lib, image, &colibri::ModelOptions::default())?;
    let mut session = model.session(&colibri::SessionOptions::default())?;
    let options = colibri::GenerateOptions {
        max_tokens: Some(max_tokens),
        sampler: Some(colibri::SamplerOptions::greedy()),
        ..Default::default()
    };
    print!("{prompt}");
    let result = session.generate_text(prompt, &options, |piece| {
        print!("{piece}");
        let _ = std::io::stdout().flush();
        ControlFlow::Continue(())
    })?;
    println!("\n[{:?}, {} tokens, libcolibri {}]", result.finish_reason, result.generated_tokens, lib.version());
    Ok(())
}
