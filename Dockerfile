FROM python:3.11-slim
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
