// Vercel AI SDK 7 (npm `ai`) with its OpenTelemetry integration (@ai-sdk/otel, GenAI semantic conventions)
// and @ai-sdk/openai-compatible against the fake chat-completions server, exported by the OpenTelemetry
// Node SDK over OTLP/HTTP protobuf. Session and user ids travel as runtime context.
// Scenarios: agent (generateText with one tool, two steps), stream (streamText),
// tool-error (the tool throws inside generateText), model-error (the server answers 500).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { OpenTelemetry } from '@ai-sdk/otel';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { generateText, registerTelemetry, stepCountIs, streamText, tool } from 'ai';
import { z } from 'zod';

// The marker strings, read from markers.py (interop.py runs this with the interop folder as cwd).
const markersFile = process.env.RFT_INTEROP_MARKERS || join(process.cwd(), 'markers.py');
const markers = Object.fromEntries(
  [...readFileSync(markersFile, 'utf8').matchAll(/^([A-Z_]+) = "([^"]*)"$/gm)].map((m) => [m[1], m[2]]),
);
for (const name of ['SYSTEM', 'PROMPT', 'TOOL_RESULT', 'TOOL_ERROR', 'FAIL', 'MODEL']) {
  if (!markers[name]) throw new Error(`marker ${name} not found in ${markersFile}`);
}

const collector = process.env.RFT_INTEROP_COLLECTOR;
const provider = new NodeTracerProvider({
  resource: resourceFromAttributes({ 'service.name': 'interop-vercel-ai-v7' }),
  spanProcessors: [
    new BatchSpanProcessor(new OTLPTraceExporter({ url: process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT })),
  ],
});
provider.register();
// Every optional attribute group on, so the fixtures show all that the integration can send.
registerTelemetry(
  new OpenTelemetry({
    agentSpanName: 'functionId',
    usage: true,
    providerMetadata: true,
    runtimeContext: true,
    headers: true,
    toolChoice: true,
  }),
);

const fake = createOpenAICompatible({
  name: 'openai',
  baseURL: process.env.RFT_INTEROP_OPENAI_URL || process.env.OPENAI_BASE_URL,
  apiKey: 'sk-interop-fake',
  includeUsage: true,
});
const model = fake.chatModel(markers.MODEL);
const runtimeContext = { sessionId: 'interop-session-1', userId: 'interop-user-1' };
const telemetry = {
  isEnabled: true,
  functionId: 'triage-agent',
  includeRuntimeContext: { sessionId: true, userId: true },
};

function lookupGuideline(fails) {
  return tool({
    description: 'Look up a guideline',
    inputSchema: z.object({ query: z.string() }),
    execute: async ({ query }) => {
      if (fails) throw new Error(`${markers.TOOL_ERROR}: guideline store unavailable for ${query}`);
      return `${markers.TOOL_RESULT}: guideline for ${query}`;
    },
  });
}

async function scenario(name) {
  await provider.forceFlush();
  const answer = await fetch(`${collector}/scenario`, { method: 'POST', body: name });
  await answer.text();
}

async function agent(fails) {
  return generateText({
    model,
    system: markers.SYSTEM,
    prompt: markers.PROMPT,
    tools: { lookup_guideline: lookupGuideline(fails) },
    stopWhen: stepCountIs(3),
    maxRetries: 0,
    runtimeContext,
    telemetry,
  });
}

await scenario('agent');
await agent(false);

await scenario('stream');
const streamed = streamText({
  model,
  system: markers.SYSTEM,
  prompt: markers.PROMPT,
  maxRetries: 0,
  runtimeContext,
  telemetry,
});
for await (const _part of streamed.textStream) {
  // consume the stream
}
await streamed.usage;

await scenario('tool-error');
try {
  await agent(true);
} catch {
  // the SDK may hand the tool error back to the model instead of throwing
}

await scenario('model-error');
try {
  await generateText({
    model,
    system: markers.SYSTEM,
    prompt: markers.FAIL,
    maxRetries: 0,
    runtimeContext,
    telemetry,
  });
} catch {
  // expected: 500 from the fake server
}

await provider.forceFlush();
await provider.shutdown();
