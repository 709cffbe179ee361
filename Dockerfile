# approval-bot: `docker build -t approval-bot .` then see docker-compose.yml.
# Two stages: the wheel is built from this repository in the first; the second is a slim
# runtime that installs the runtime lock (requirements/serve.txt, hash-checked) and then
# the wheel without dependencies, run as a non-root user.

FROM python:3.12-slim AS build
WORKDIR /src
COPY requirements ./requirements
RUN pip install --no-cache-dir --require-hashes --no-deps -r requirements/serve.txt
COPY pyproject.toml README.md ./
COPY approvals ./approvals
COPY bot ./bot
RUN pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /wheels .

FROM python:3.12-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PORT=3000 \
    APPROVALS_DATA_DIR=/var/lib/approval-bot
COPY requirements/serve.txt /tmp/serve.txt
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --require-hashes --no-deps -r /tmp/serve.txt \
    && pip install --no-cache-dir --no-deps /wheels/*.whl \
    && rm -rf /wheels /tmp/serve.txt \
    && groupadd --system --gid 10001 approval \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/approval-bot \
       --create-home approval
USER 10001:10001
WORKDIR /var/lib/approval-bot
EXPOSE 3000
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PORT', '3000'), timeout=2).status == 200 else 1)"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["approval-bot"]
CMD ["serve"]
