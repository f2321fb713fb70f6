package io.httpdns.android

import okhttp3.Dns
import okhttp3.mockwebserver.Dispatcher
import okhttp3.mockwebserver.MockResponse
import okhttp3.mockwebserver.MockWebServer
import okhttp3.mockwebserver.RecordedRequest
import java.io.File
import java.net.InetAddress
import java.net.UnknownHostException
import java.security.KeyPairGenerator
import java.security.Signature
import java.util.concurrent.CopyOnWriteArrayList
import java.util.concurrent.atomic.AtomicLong

/** Shared helpers of the tests: loopback servers, a fake clock, a LocalDNS stand-in, a config signer. */
object TestKit {
    fun vectors(name: String): Map<String, Any?> {
        val dir = System.getProperty("httpdns.vectors") ?: "../vectors"
        return Json.parseObject(File(dir, name).readText(Charsets.UTF_8))
    }

    /** A loopback HTTP server answering with `handler`; records every request. */
    class Server(private val handler: (RecordedRequest) -> MockResponse) : AutoCloseable {
        val requests = CopyOnWriteArrayList<RecordedRequest>()
        val server = MockWebServer().apply {
            dispatcher = object : Dispatcher() {
                override fun dispatch(request: RecordedRequest): MockResponse {
                    requests.add(request)
                    return handler(request)
                }
            }
            start(InetAddress.getByName("127.0.0.1"), 0)
        }
        val url: String get() = "http://127.0.0.1:${server.port}"
        val port: Int get() = server.port
        fun paths(prefix: String) = requests.filter { it.path!!.startsWith(prefix) }
        override fun close() = server.shutdown()
    }

    fun json(body: String, code: Int = 200) = MockResponse().setResponseCode(code).setHeader("Content-Type", "application/json").setBody(body)

    fun answer(host: String, vararg ips: String, ttl: Int = 60, extra: String = ""): String {
        val v4 = ips.filter { !it.contains(':') }.joinToString(",") { "\"$it\"" }
        val v6 = ips.filter { it.contains(':') }.joinToString(",") { "\"$it\"" }
        return """{"dns":[{"host":"$host","client_ip":"1.0.2.7","ips":[$v4],"ipsv6":[$v6],"ttl":$ttl,"origin_ttl":$ttl$extra}]}"""
    }

    class FakeClock(start: Long = 1_000_000) : Clock {
        val now = AtomicLong(start)
        override fun millis(): Long = now.get()
        fun advance(ms: Long) { now.addAndGet(ms) }
    }

    /** A LocalDNS stand-in: fixed answers, counted. */
    class FakeDns(private val answers: Map<String, List<String>>) : Dns {
        val asked = CopyOnWriteArrayList<String>()
        override fun lookup(hostname: String): List<InetAddress> {
            asked.add(hostname)
            val ips = answers[hostname] ?: throw UnknownHostException("$hostname: not in the fake LocalDNS")
            return ips.map { InetAddress.getByName(it) }
        }
    }

    /** An Ed25519 key pair from the JDK (15+), as the config center signs. */
    class Signer {
        private val kp = KeyPairGenerator.getInstance("Ed25519").generateKeyPair()
        val publicKey: String = Codec.base64(kp.public.encoded.copyOfRange(kp.public.encoded.size - 32, kp.public.encoded.size))
        fun sign(body: String): String = Signature.getInstance("Ed25519").run {
            initSign(kp.private)
            update(body.toByteArray(Charsets.UTF_8))
            Codec.base64(sign())
        }
    }

    fun doc(version: Long, hosts: List<String>, merges: String = "", publicIps: String = "", extra: String = ""): String =
        """{"mergeHostConfigs":[$merges],"hostListConfig":[${hosts.joinToString(",") { "{\"host\":\"$it\",\"rate\":1}" }}],""" +
            """"reviveProbeInterval":600000,"configRequestInterval":600000,"configVersion":$version,"publicIpList":[$publicIps]$extra}"""

    /** A builder for loopback tests: no system resolver, no route probes, no events unless asked. */
    fun builder(vararg services: String): HttpDns.Builder = HttpDns.builder()
        .serviceUrls(services.toList())
        .allowPrivateAddresses(true)
        .localDns(FakeDns(emptyMap()))
        .ipStackDetector { IpStack.IPV4 }
        .refreshServiceIps(false)
        .events(false)
        .timeoutMs(1000)

    fun eventually(timeoutMs: Long = 5000, check: () -> Boolean) {
        val end = System.nanoTime() + timeoutMs * 1_000_000
        while (System.nanoTime() < end) {
            if (check()) return
            Thread.sleep(20)
        }
        throw AssertionError("condition not met within $timeoutMs ms")
    }
}
