"""Every protobuf <-> domain mapping of the DeviceDaemon service, and nothing else.

Requests become domain objects here (after `validation` checked them); domain results become
messages here. Neither the core nor the servicer builds a message field by field.
"""

from __future__ import annotations

from edgellm.common.proto_fields import copied
from edgellm.device.constrain import Constraint, ConstraintKind
from edgellm.device.core.state import ConfigUpdate, DaemonState, EngineState, SettingRestore, TelemetryFrame
from edgellm.device.decoding import FinishReason, Speculation
from edgellm.device.generation import Delta, Event, GenerationJob, Stats
from edgellm.device.governor.actuation import GovernorPolicy, ThermalPolicy
from edgellm.device.governor.capacity import CapacityState
from edgellm.device.governor.runtime import GovernorSnapshot, GovernorUpdate
from edgellm.device.logprobs import Logprob
from edgellm.device.sampler import SamplingConfig
from edgellm.device.store import StoreStatus
from edgellm.engine.wire import artifact_info
from edgellm.v1 import device_pb2

FINISH = {
    FinishReason.STOP: device_pb2.FINISH_REASON_STOP,
    FinishReason.LENGTH: device_pb2.FINISH_REASON_LENGTH,
    FinishReason.CANCELLED: device_pb2.FINISH_REASON_CANCELLED,
    FinishReason.CONTEXT: device_pb2.FINISH_REASON_CONTEXT,
}
STATES = {
    EngineState.EMPTY: device_pb2.ENGINE_STATE_EMPTY,
    EngineState.LOADING: device_pb2.ENGINE_STATE_LOADING,
    EngineState.IDLE: device_pb2.ENGINE_STATE_IDLE,
    EngineState.PREFILL: device_pb2.ENGINE_STATE_PREFILL,
    EngineState.DECODE: device_pb2.ENGINE_STATE_DECODE,
}
CAPACITY = {
    CapacityState.UNKNOWN: device_pb2.CAPACITY_STATE_UNKNOWN,
    CapacityState.AVAILABLE: device_pb2.CAPACITY_STATE_AVAILABLE,
    CapacityState.EXHAUSTED: device_pb2.CAPACITY_STATE_THERMAL_HEADROOM_EXHAUSTED,
}


# -- requests -> domain ------------------------------------------------------------------------------
def sampling_from(p: device_pb2.SamplingParams) -> SamplingConfig:
    """SamplingConfig from SamplingParams (proto3 zeros mean 'off')."""
    return SamplingConfig(
        temperature=float(p.temperature),
        top_k=int(p.top_k),
        top_p=float(p.top_p) if p.top_p > 0 else 1.0,
        min_p=float(p.min_p),
        repetition_penalty=float(p.repetition_penalty) if p.repetition_penalty != 0 else 1.0,
        presence_penalty=float(p.presence_penalty),
        frequency_penalty=float(p.frequency_penalty),
        logit_bias={int(k): float(v) for k, v in p.logit_bias.items()},
        seed=int(p.seed) if p.HasField("seed") else None,
    )


def job_from(req: device_pb2.GenerateRequest, request_id: str, received_at: float) -> GenerationJob:
    """GenerationJob from a GenerateRequest that `validation.check_generate` accepted."""
    return GenerationJob(
        request_id=request_id,
        prompt=req.prompt or None,
        messages=tuple((m.role, m.content) for m in req.messages),
        max_new_tokens=req.max_new_tokens,
        sampling=sampling_from(req.sampling),
        stop=tuple(s for s in req.stop if s),
        session_id=req.session_id,
        kv_window=req.kv_window,
        n_keep=req.n_keep,
        received_at=received_at,
        constraint=constraint_from(req.constraint) if req.HasField("constraint") else None,
        speculation=SPECULATION.get(req.speculation, Speculation.AUTO),
        logprobs=req.logprobs,
        top_logprobs=req.top_logprobs,
        prompt_logprobs=req.prompt_logprobs,
        prompt_token_ids=tuple(req.prompt_token_ids),
    )


# UNSPECIFIED (and any value from a newer client) is AUTO: it keeps greedy output token-identical
# and sampled output identically distributed, and drafts only where it pays (docs/speculation.md).
SPECULATION = {
    device_pb2.SPECULATION_OFF: Speculation.OFF,
    device_pb2.SPECULATION_FAST: Speculation.FAST,
}


def constraint_from(c: device_pb2.OutputConstraint) -> Constraint:
    """Constraint from OutputConstraint (its oneof names the kind; json_object carries no text)."""
    kind = ConstraintKind(c.WhichOneof("kind") or "")  # validation refused an empty oneof
    return Constraint(kind, "" if kind == ConstraintKind.JSON_OBJECT else str(getattr(c, kind.value)))


def config_update_from(req: device_pb2.UpdateConfigRequest) -> ConfigUpdate:
    """ConfigUpdate from UpdateConfigRequest: unset optional fields stay None (= unchanged)."""
    return ConfigUpdate(
        threads=req.threads if req.HasField("threads") else None,
        kv_window=req.kv_window if req.HasField("kv_window") else None,
        n_keep=req.n_keep if req.HasField("n_keep") else None,
        governor=GovernorUpdate(
            policy=GovernorPolicy.parse(req.governor_policy) if req.HasField("governor_policy") else None,
            setpoint_c=req.setpoint_c if req.HasField("setpoint_c") else None,
            pacing_ms=req.pacing_ms if req.HasField("pacing_ms") else None,
            power=req.power if req.HasField("power") else None,
            cluster=req.cluster if req.HasField("cluster") else None,
            thermal_policy=ThermalPolicy.parse(req.thermal_policy)
            if req.HasField("thermal_policy")
            else None,
        ),
        forget_saved=req.forget_saved,
    )


# -- domain -> messages ------------------------------------------------------------------------------
def generate_response(event: Event, request_id: str) -> device_pb2.GenerateResponse:
    """One GenerateResponse: a text delta, or the last message with the finish reason and stats."""
    if isinstance(event, Delta):
        return device_pb2.GenerateResponse(
            text=event.text,
            token_ids=event.token_ids,
            request_id=request_id,
            logprobs=[logprob_message(lp) for lp in event.logprobs],
            prompt_logprobs=[logprob_message(lp) for lp in event.prompt_logprobs],
        )
    return device_pb2.GenerateResponse(
        request_id=request_id,
        finish_reason=FINISH[event.reason],
        stats=stats_message(event.stats),
        stop_sequence=event.stop_sequence,
    )


def logprob_message(lp: Logprob) -> device_pb2.TokenLogprob:
    """TokenLogprob from a Logprob (no logprob: a prompt's first token)."""
    message = device_pb2.TokenLogprob(
        token_id=lp.token, token=lp.text, top=[logprob_message(t) for t in lp.top]
    )
    if lp.logprob is not None:
        message.logprob = lp.logprob
    return message


def stats_message(s: Stats) -> device_pb2.GenerateStats:
    """GenerateStats from the core's Stats (the same field names)."""
    return copied(device_pb2.GenerateStats, s)


def artifact_status_message(st: StoreStatus) -> device_pb2.ArtifactStatus:
    """ArtifactStatus from the store's StoreStatus."""
    return device_pb2.ArtifactStatus(
        artifact_id=st.artifact_id,
        installed=st.installed,
        files=[
            device_pb2.FileStatus(path=f.path, size=f.size, have_bytes=f.have_bytes, complete=f.complete)
            for f in st.files
        ],
    )


def restore_message(r: SettingRestore) -> device_pb2.SettingRestore:
    """SettingRestore from the core's report of one setting `config reset` put back."""
    return device_pb2.SettingRestore(name=r.name, was=r.was, now=r.now, not_restored=r.not_restored)


def status_message(s: DaemonState) -> device_pb2.DaemonStatus:
    """DaemonStatus from the core's DaemonState (same-named fields copied; `model` set below)."""
    tuning = s.thread_tuning
    msg = copied(
        device_pb2.DaemonStatus,
        s,
        skip=("model",),
        engine_state=STATES[s.engine_state],
        governor=governor_message(s.governor),
        thread_tuning=copied(
            device_pb2.ThreadTuning,
            tuning,
            trials=[copied(device_pb2.ThreadTrial, t) for t in tuning.trials],
            measured_unix=tuning.measured_unix if tuning.trials else 0.0,
        ),
    )
    if s.model is not None:
        msg.model.CopyFrom(artifact_info(s.model.artifact, loaded=True))
        msg.context_tokens = s.model.context_length
        msg.load_ms = s.model.load_ms
        msg.warmup_ms = s.model.warmup_ms
    return msg


def governor_message(g: GovernorSnapshot) -> device_pb2.GovernorState:
    """GovernorState from the governor's snapshot (the same field names)."""
    return copied(
        device_pb2.GovernorState,
        g,
        capabilities=[copied(device_pb2.GovernorCapability, c) for c in g.capabilities],
        capacity_state=CAPACITY[g.capacity_state],
    )


def sample_message(frame: TelemetryFrame) -> device_pb2.TelemetrySample:
    """One TelemetrySample: OS reading + engine + governor."""
    r = frame.reading
    msg = copied(
        device_pb2.TelemetrySample,
        frame,
        # the OS reading's fields, whose names differ on the wire
        unix_time=r.unix_time,
        zones=[copied(device_pb2.ThermalZone, z) for z in r.zones],
        cores=[copied(device_pb2.CoreFrequency, c) for c in r.cores],
        mem_available_bytes=r.memory.available_bytes,
        mem_total_bytes=r.memory.total_bytes,
        rss_bytes=r.process.rss_bytes,
        rss_peak_bytes=r.process.rss_peak_bytes,
        process_cpu_seconds=r.process.cpu_seconds,
        engine_state=STATES[frame.engine_state],
        governor=governor_message(frame.governor),
    )
    if r.soc_c is not None:
        msg.soc_celsius = r.soc_c
    if r.skin_c is not None:
        msg.skin_celsius = r.skin_c
    if r.battery_c is not None:
        msg.battery_celsius = r.battery_c
    return msg
