FROM python:3.11-slim
# ssh: the scheduled sacct import runs the Slurm head node's sacct over ssh with a key
# (FINOPS_SACCT_COMMAND="ssh -F /etc/gpu-finops/sacct-ssh/config slurm-head sacct"; docs/deployment.md).
RUN apt-get update \
    && apt-get install -y --no-install-recommends openssh-client \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY collector collector
COPY finops finops
COPY alerts alerts
COPY dashboards dashboards
COPY migrations migrations
RUN pip install --no-cache-dir '.[dashboard]'
USER nobody
EXPOSE 8080
CMD ["gpu-finops", "serve", "--host", "0.0.0.0", "--port", "8080"]
