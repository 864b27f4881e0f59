#!/bin/sh
# The acidtables image's entry point: one image runs the operator, the jobs, and Spark's driver and
# executors, dispatched on the first argument as the official Spark image's entry point does.
#
#   operator [options]    the Kubernetes operator (acidtables operator)
#   driver [args]         Spark's driver in client mode (what spark-submit's cluster mode starts in a pod)
#   executor              Spark's executor backend, from the SPARK_* variables Spark sets on executor pods
#   compact|... [args]    an acidtables job (python -m acidtables.jobs)
#   acidtables|python|sh  that command as given
set -eu

# The pod may run as any uid (OpenShift-style random uids, the chart's 185): Java wants a home and a
# user name, so give it a writable one.
export HOME="${HOME:-/tmp}"
[ -w "$HOME" ] || export HOME=/tmp

case "${1:-}" in
    operator)
        exec acidtables "$@"
        ;;
    driver)
        shift
        exec "$SPARK_HOME/bin/spark-submit" \
            --deploy-mode client \
            --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS:-0.0.0.0}" \
            "$@"
        ;;
    executor)
        shift
        : "${SPARK_DRIVER_URL:?Spark sets SPARK_DRIVER_URL on executor pods; this is not one}"
        # Spark's pod spec sets SPARK_JAVA_OPT_0.. (the executor's Java options) one variable each
        java_opts=$(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/^[^=]*=//' | tr '\n' ' ')
        # shellcheck disable=SC2086 # the options are words on purpose
        exec java ${java_opts} \
            -Xms"${SPARK_EXECUTOR_MEMORY:-1g}" -Xmx"${SPARK_EXECUTOR_MEMORY:-1g}" \
            -cp "${SPARK_CLASSPATH:+$SPARK_CLASSPATH:}$SPARK_HOME/conf:$SPARK_HOME/jars/*" \
            org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
            --driver-url "$SPARK_DRIVER_URL" \
            --executor-id "${SPARK_EXECUTOR_ID:?}" \
            --cores "${SPARK_EXECUTOR_CORES:-1}" \
            --app-id "${SPARK_APPLICATION_ID:?}" \
            --hostname "${SPARK_EXECUTOR_POD_IP:?}" \
            --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
            --podName "${SPARK_EXECUTOR_POD_NAME:-$(hostname)}"
        ;;
    acidtables|python|python3|sh|bash|java)
        exec "$@"
        ;;
    *)
        exec python -m acidtables.jobs "$@"
        ;;
esac
