"""onnxruntime's ``capi`` package layout: ``_pybind_state`` and
``onnxruntime_pybind11_state`` (the native layer), ``onnxruntime_inference_collection``
(the Python classes)."""
