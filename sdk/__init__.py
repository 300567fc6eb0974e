"""What plugin authors touch (``sparse_ops.sdk``).

The kernel decorators, typed views, op context, ``opcheck`` and the plugin template
arrive with the custom-operator and plugin issues. For now this holds the SDK version
that plugins declare compatibility with.
"""
SDK_VERSION = "0.1"
