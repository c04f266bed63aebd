-- wrk script for bench/bench_write_path.py: each wrk thread (one connection) acts as
-- an agent that opens a flow, writes STEPS_PER_FLOW steps (one with a PII field, so
-- encryption is on the path), closes the flow, and starts over.
local token = os.getenv("RFT_BENCH_TOKEN")
local steps_per_flow = tonumber(os.getenv("RFT_BENCH_STEPS") or "5")
-- "single": one request per step; "batch": the flow's steps in one request.
local mode = os.getenv("RFT_BENCH_MODE") or "single"
local kinds = { "retrieval", "evidence_assembly", "llm_prompt", "provenance_check", "verdict" }

local headers = {
  ["Authorization"] = "Bearer " .. token,
  ["Content-Type"] = "application/json",
}
local flow_body = '{"trigger_type":"user_question","trigger_ref":"bench/run/case","agent":"researcher",'
  .. '"trigger_summary":"Benchmark question"}'
local close_body = '{"flow_state":"completed","outcome_type":"recommendation_delivered",'
  .. '"outcome_summary":"Benchmark outcome"}'

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  phase = "flow"
  flow_id = nil
  written = 0
  steps_ok = 0
  flows_ok = 0
  closes_ok = 0
  errors = 0
  last_error = ""
end

local function step_body(n)
  local kind = kinds[(n % #kinds) + 1]
  return '{"kind":"' .. kind .. '","agent":"researcher","summary_text":"Benchmark step ' .. n
    .. ' reviewed the evidence","inputs":{"query":"labs","patient_name":"Bench Patient"},'
    .. '"pii_fields":["patient_name"],"outputs":{"hits":3},"confidence":0.93,"latency_ms":12,'
    .. '"llm_call_log_ref":"llm-' .. n .. '"}'
end

function request()
  if phase == "flow" then
    return wrk.format("POST", "/api/reasoning/flows", headers, flow_body)
  elseif phase == "step" and mode == "batch" then
    local bodies = {}
    for n = 0, steps_per_flow - 1 do
      bodies[#bodies + 1] = step_body(n)
    end
    local batch = '{"steps":[' .. table.concat(bodies, ",") .. ']}'
    return wrk.format("POST", "/api/reasoning/flows/" .. flow_id .. "/steps/batch", headers, batch)
  elseif phase == "step" then
    return wrk.format("POST", "/api/reasoning/flows/" .. flow_id .. "/steps", headers, step_body(written))
  else
    return wrk.format("PATCH", "/api/reasoning/flows/" .. flow_id, headers, close_body)
  end
end

function response(status, hdrs, body)
  if phase == "flow" then
    if status == 201 then
      flow_id = body:match('"id":"([0-9a-f%-]+)"')
      flows_ok = flows_ok + 1
      written = 0
      phase = "step"
    else
      errors = errors + 1
      last_error = status .. " " .. body:sub(1, 200)
    end
  elseif phase == "step" then
    if status == 201 then
      local count = mode == "batch" and steps_per_flow or 1
      steps_ok = steps_ok + count
      written = written + count
      if written >= steps_per_flow then
        phase = "close"
      end
    else
      errors = errors + 1
      last_error = status .. " " .. body:sub(1, 200)
      phase = "flow"
    end
  else
    if status == 200 then
      closes_ok = closes_ok + 1
    else
      errors = errors + 1
      last_error = status .. " " .. body:sub(1, 200)
    end
    phase = "flow"
  end
end

function done(summary, latency, requests)
  local steps, flows, closes, errs = 0, 0, 0, 0
  local sample = ""
  for _, thread in ipairs(threads) do
    steps = steps + thread:get("steps_ok")
    flows = flows + thread:get("flows_ok")
    closes = closes + thread:get("closes_ok")
    errs = errs + thread:get("errors")
    if thread:get("last_error") ~= "" then
      sample = thread:get("last_error")
    end
  end
  io.write(string.format(
    "RESULT steps=%d flows=%d closes=%d errors=%d requests=%d duration_us=%d p50_us=%d p99_us=%d\n",
    steps, flows, closes, errs, summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99)))
  if sample ~= "" then
    io.write("SAMPLE_ERROR " .. sample .. "\n")
  end
end
