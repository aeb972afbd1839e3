"""The `ArtifactInfo` message for an opened artifact: one mapping for the daemon and HostService."""

from __future__ import annotations

from edgellm.common.proto_fields import copied
from edgellm.engine.artifact import Artifact
from edgellm.engine.chat_template import chat_template, has_chat_template
from edgellm.v1 import common_pb2


def artifact_info(artifact: Artifact, loaded: bool) -> common_pb2.ArtifactInfo:
    """ArtifactInfo for an artifact (sampling_defaults unset when its manifest records none,
    chat_template when it carries none)."""
    m = artifact.manifest
    info = common_pb2.ArtifactInfo(
        artifact_id=artifact.artifact_id,
        name=m.name,
        source_model=m.source.name,
        quantization=m.quantization.label,
        size_bytes=m.size_bytes,
        files=[common_pb2.ArtifactFile(path=f.path, size=f.size, sha256=f.sha256) for f in m.files],
        loaded=loaded,
        chat_tuned=has_chat_template(artifact.path, artifact.artifact_id),
    )
    if m.sampling is not None:
        info.sampling_defaults.CopyFrom(copied(common_pb2.SamplingDefaults, m.sampling))
    template = chat_template(artifact)
    if template is not None:
        info.chat_template.CopyFrom(
            common_pb2.ChatTemplate(
                template=template.source,
                bos_token=template.bos_token,
                eos_token=template.eos_token,
                tokens=dict(template.tokens),
            )
        )
    return info
