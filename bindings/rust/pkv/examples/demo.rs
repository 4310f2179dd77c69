//! demo.rs - the job every binding's example repeats, step for step (bindings/DEMO.md): load pkv,
//! create a CPU engine, admit three requests sharing a system prompt, prefill and decode them
//! with attention on small random q/k/v, fork one sequence (copy-on-write), release everything,
//! print the stats. Same seed, same output as examples/demo.c.
//!
//! Usage: cargo run --example demo -- [seed]   (default 42)
use pkv::{Device, Dtype, Engine, Params, Seq};

const LAYERS: u32 = 2;
const Q_HEADS: usize = 4;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = 16;
const SYSTEM_LEN: usize = 32;
const REQUESTS: usize = 3;
const DECODE_STEPS: usize = 4;

/// splitmix64: the demo's only source of randomness, easy to repeat in any language.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }
    fn token(&mut self) -> i32 {
        (self.next_u64() % 1000) as i32
    }
    fn value(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / 16777216.0 - 0.5
    }
}

/// One step over seqs: random q/k/v for every new token, attention on every layer. Returns the
/// sum of all outputs.
fn step(engine: &Engine, rng: &mut Rng, seqs: &[Seq]) -> pkv::Result<f64> {
    let mut batch = engine.batch(seqs, None)?;
    let q_len = batch.num_tokens() * Q_HEADS * HEAD_DIM;
    let kv_len = batch.num_tokens() * KV_HEADS * HEAD_DIM;
    let mut out = vec![0f32; q_len];
    let mut sum = 0f64;
    for layer in 0..LAYERS {
        let q: Vec<f32> = (0..q_len).map(|_| rng.value()).collect();
        let k: Vec<f32> = (0..kv_len).map(|_| rng.value()).collect();
        let v: Vec<f32> = (0..kv_len).map(|_| rng.value()).collect();
        batch.attention(layer, &q, &k, &v, &mut out)?;
        for &x in &out {
            sum += f64::from(x); // in index order, as demo.c
        }
    }
    // A failed end gives the batch back inside its error; `?` drops it there, which aborts it.
    batch.end()?;
    Ok(sum)
}

/// C's printf("%.6g", x).
fn format_g6(x: f64) -> String {
    if !x.is_finite() {
        return if x.is_nan() {
            "nan".into()
        } else if x > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    let sci = format!("{:.5e}", x); // d.ddddde<exp>, rounded as %g rounds
    let (mantissa, exp) = sci.split_once('e').unwrap();
    let exp: i32 = exp.parse().unwrap();
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{}{:02}", trim(mantissa), sign, exp.abs())
    } else {
        trim(&format!("{:.*}", (5 - exp) as usize, x))
    }
}

fn main() -> pkv::Result<()> {
    let seed = match std::env::args().nth(1) {
        Some(arg) => arg.parse().unwrap_or_else(|_| panic!("seed: not a u64: {}", arg)),
        None => 42,
    };
    let mut rng = Rng(seed);
    let lib = pkv::library()?; // loads libpkv and checks its ABI version
    let params = Params::with_library(lib)?
        .num_layers(LAYERS)
        .num_q_heads(Q_HEADS as u32)
        .num_kv_heads(KV_HEADS as u32)
        .head_dim(HEAD_DIM as u32)
        .dtype(Dtype::F32)
        .block_size(16)
        .num_blocks(64)
        .device(Device::Cpu)
        .num_threads(1);
    let engine = Engine::new(&params)?;
    println!("pkv {} abi {}", lib.version(), lib.abi_version());

    let system: Vec<i32> = (0..SYSTEM_LEN).map(|_| rng.token()).collect();
    let mut seqs = Vec::new();
    let mut checksum = 0f64;
    print!("cached tokens:");
    for _ in 0..REQUESTS {
        let len = SYSTEM_LEN + 5 + (rng.next_u64() % 10) as usize;
        let mut tokens = system.clone();
        tokens.extend((SYSTEM_LEN..len).map(|_| rng.token()));
        let admitted = engine.allocate(&tokens, None)?;
        print!(" {}", admitted.num_cached_tokens);
        seqs.push(admitted.seq);
        checksum += step(&engine, &mut rng, &[admitted.seq])?; // prefill
    }
    println!();
    for _ in 0..DECODE_STEPS {
        for &seq in &seqs {
            engine.append(seq, &[rng.token()])?;
        }
        checksum += step(&engine, &mut rng, &seqs)?;
    }
    let child = engine.fork(seqs[0])?;
    engine.append(child, &[rng.token()])?;
    checksum += step(&engine, &mut rng, &[child])?;
    seqs.push(child);

    let st = engine.stats()?;
    println!("prefix: {} of {} tokens cached", st.prefix_hit_tokens, st.prefix_query_tokens);
    println!(
        "blocks used: {} of {}, copy-on-write copies: {}",
        st.num_used_blocks, st.num_blocks, st.num_cow_copies
    );
    println!("attention checksum: {}", format_g6(checksum));
    for &seq in &seqs {
        engine.release(seq)?;
    }
    let st = engine.stats()?;
    println!("after release: {} blocks free, {} of them cached", st.num_free_blocks, st.num_cached_blocks);
    engine.close();
    Ok(())
}
