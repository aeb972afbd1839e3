"""The one artifact builder: source -> fp model -> plan applied in torch -> MNN export -> measured.

`pipeline.build_artifact` is the pipeline; `source` resolves and dequantizes the source model;
`loaded.LoadedModel` holds the fp model that several builds (an auto search, a benchmark) share.
"""
