// Runs a GGUF file in llama.cpp (through the npm package node-llama-cpp, prebuilt, never built or downloaded
// at run time) and answers in JSON. rloo_kit/export/llama_cpp.py starts it; see there for why this runtime.
//
// stdin:  {"model": "x.gguf", "threads": 2, "context": 1024,
//          "requests": [{"op": "greedy", "text": "..."|"tokens": [..], "max_tokens": 32},
//                       {"op": "forced", "tokens": [..prompt], "targets": [..]},
//                       {"op": "tokenize", "text": "..."}, {"op": "detokenize", "tokens": [..]}]}
// stdout: {"results": [{"prompt_tokens": [..], "tokens": [..], "text": "..."} | {"top1": [..]} | ...],
//          "eog": [..]}
// A request's "text" is tokenized by llama.cpp with special tokens parsed (a chat-templated prompt as is).
// where the package lives is the caller's to say (a project-local install, not a global one)
const entry = process.env.RLOO_KIT_NODE_LLAMA_CPP;
const { getLlama, LlamaLogLevel } = await import(entry ? new URL(`file://${entry}`).href : "node-llama-cpp");

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

function promptTokens(model, request) {
  return request.tokens ?? model.tokenize(request.text, true);
}

async function greedy(model, sequence, request) {
  const prompt = promptTokens(model, request);
  const tokens = [];
  if ((request.max_tokens ?? 32) > 0) {
    for await (const token of sequence.evaluate(prompt, { temperature: 0 })) {
      if (model.isEogToken(token)) break;
      tokens.push(token);
      if (tokens.length >= (request.max_tokens ?? 32)) break;
    }
  }
  return { prompt_tokens: prompt, tokens, text: model.detokenize(tokens) };
}

async function forced(model, sequence, request) {
  // the argmax next token after each prefix prompt + targets[:i], for every i: teacher-forced top-1
  const prompt = promptTokens(model, request);
  const all = [...prompt, ...request.targets];
  const asks = new Set(request.targets.map((_, i) => prompt.length - 1 + i));
  const input = all.slice(0, -1).map((token, i) =>
    asks.has(i) ? [token, { generateNext: { token: true, options: { temperature: 0 } } }] : token);
  const out = await sequence.controlledEvaluate(input);
  return { prompt_tokens: prompt, top1: [...asks].map((i) => out[i]?.next?.token ?? null) };
}

const request = await readStdin();
const llama = await getLlama({ gpu: false, build: "never", skipDownload: true, logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: request.model, gpuLayers: 0 });
const context = await model.createContext({ contextSize: request.context ?? 1024, threads: request.threads ?? 0 });
const sequence = context.getSequence();
const results = [];
for (const r of request.requests) {
  if (r.op === "tokenize") {
    results.push({ tokens: model.tokenize(r.text, true) });
  } else if (r.op === "detokenize") {
    results.push({ text: model.detokenize(r.tokens, true) });
  } else {
    await sequence.clearHistory();
    results.push(r.op === "forced" ? await forced(model, sequence, r) : await greedy(model, sequence, r));
  }
}
const eog = [...new Set([model.tokens.eos, model.tokens.eot].filter((t) => t != null))];
process.stdout.write(JSON.stringify({ results, eog }));
await context.dispose();
await model.dispose();
await llama.dispose();
