"""Planning: GPU memory for an LLM, training time and cost, inference sizing, all-reduce time, storage bandwidth.

The formulas and their sources are in :mod:`finops.analysis.planning`. Where the cluster has measured data, it is the
default: the price per GPU-hour the ledger charged over the last 30 days (to the viewer's team, for someone who sees
one team).
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pandas as pd
import streamlit as st

from dashboards import data, login
from dashboards.format import headline, money, table
from finops.analysis import planning
from finops.timeutil import utc_now

GB = 1e9

st.title("Planning")
now = utc_now().replace(minute=0, second=0, microsecond=0)
rows = data.report(data.database_url(), now - timedelta(days=30), now, "team", login.current().scope)
gpu_hours = sum(row.allocated_gpu_seconds for row in rows) / 3600
measured_price = (
    (sum((row.allocated_cost for row in rows), Decimal(0)) / Decimal(repr(gpu_hours))) if gpu_hours else None
)
currency = rows[0].currency if rows else "USD"
default_price = float(measured_price.quantize(Decimal("0.01"))) if measured_price else 2.50
if measured_price:
    st.caption(f"Measured price over the last 30 days: {money(measured_price, currency)} per GPU-hour (the default).")

memory, training, inference, network, storage = st.tabs(
    ["GPU memory", "Training time and cost", "Inference sizing", "All-reduce", "Storage bandwidth"]
)

with memory:
    parameters = st.number_input("Parameters (billions)", min_value=0.1, value=7.0) * 1e9
    precision = st.selectbox("Precision", list(planning.BYTES_PER_PARAMETER), index=1)
    layers = st.number_input("Layers", min_value=1, value=32)
    kv_heads = st.number_input("KV heads", min_value=1, value=32)
    head_dim = st.number_input("Head dimension", min_value=1, value=128)
    context = st.number_input("Context (tokens)", min_value=1, value=4096)
    batch = st.number_input("Concurrent sequences", min_value=1, value=8)
    gpus = st.number_input("Data-parallel GPUs (training)", min_value=1, value=8)
    weights = planning.weights_bytes(parameters, precision)
    cache = planning.kv_cache_bytes(layers, kv_heads, head_dim, context, batch, precision)
    st.metric("Inference: weights + KV cache", f"{(weights + cache) / GB:,.1f} GB")
    sharded = {
        stage: round(planning.training_state_bytes_per_gpu(parameters, gpus, stage) / GB, 1) for stage in (0, 1, 2, 3)
    }
    table(
        pd.DataFrame([{"zero_stage": stage, "training_state_gb": size} for stage, size in sharded.items()]),
        "training-state-per-gpu.csv",
    )

with training:
    train_parameters = st.number_input("Parameters (billions) ", min_value=0.1, value=7.0) * 1e9
    tokens = st.number_input("Training tokens (billions)", min_value=1.0, value=2000.0) * 1e9
    train_gpus = st.number_input("GPUs", min_value=1, value=256)
    achieved = st.number_input("Achieved TFLOP/s per GPU", min_value=1.0, value=400.0) * 1e12
    price = st.number_input(f"Price per GPU-hour ({currency})", min_value=0.0, value=default_price)
    estimate = planning.training_estimate(train_parameters, tokens, train_gpus, achieved, Decimal(repr(price)))
    st.metric("Wall time", f"{estimate.wall_seconds / 86400:,.1f} days")
    headline("GPU-hours", estimate.gpu_hours, "GPU-h", places=0)
    headline("Cost", estimate.cost, currency)

with inference:
    qps = st.number_input("Peak requests per second", min_value=0.0, value=200.0)
    latency = st.number_input("Latency per request (s)", min_value=0.0, value=2.0)
    per_gpu = st.number_input("Requests a GPU serves at once", min_value=1.0, value=32.0)
    headroom = st.slider("Headroom", 0.0, 1.0, 0.2)
    st.metric("GPUs (N+1)", planning.inference_gpus(qps, latency, per_gpu, headroom, spares=1))

with network:
    message = st.number_input("Gradient size (GB)", min_value=0.0, value=1.0) * GB
    ring = st.number_input("GPUs in the ring", min_value=1, value=8)
    bandwidth = st.number_input("Link bandwidth (GB/s)", min_value=0.1, value=100.0) * GB
    step_latency = st.number_input("Latency per step (µs)", min_value=0.0, value=10.0) / 1e6
    st.metric(
        "All-reduce time", f"{planning.ring_allreduce_seconds(message, ring, bandwidth, step_latency) * 1000:,.2f} ms"
    )

with storage:
    fed = st.number_input("GPUs reading data", min_value=1, value=64)
    rate = st.number_input("Samples per second per GPU", min_value=0.0, value=2000.0)
    size = st.number_input("Bytes per sample", min_value=0.0, value=110e3)
    st.metric("Read bandwidth", f"{planning.storage_read_bytes_per_second(fed, rate, size) / GB:,.2f} GB/s")
