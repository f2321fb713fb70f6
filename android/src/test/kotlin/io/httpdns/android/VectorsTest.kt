package io.httpdns.android

import okhttp3.HttpUrl.Companion.toHttpUrl
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertNotNull
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Test

/** The shared vectors of `vectors/` (also read by crates/client/tests/vectors.rs). */
class VectorsTest {
    private fun objs(m: Map<String, Any?>, key: String) = m.list(key).map { Json.asObject(it)!! }

    @Test
    fun buckets() {
        val v = TestKit.vectors("buckets.json")
        for (b in objs(v, "buckets")) assertEquals(b.long("bucket"), Buckets.bucket(b.str("key")!!, b.str("deviceId")!!), b.toString())
        for (t in objs(v, "thresholds")) assertEquals(t.long("threshold"), Buckets.threshold(t.double("rate")!!), t.toString())
        for (e in objs(v, "enabled")) assertEquals(e.bool("enabled"), Buckets.enabled(e.str("key")!!, e.str("deviceId")!!, e.double("rate")!!), e.toString())
        assert(v.list("buckets").size >= 20)
    }

    @Test
    fun signResolve() {
        for (s in objs(TestKit.vectors("sign_resolve.json"), "vectors")) {
            assertEquals(s.str("s"), Signing.signResolve(s.str("host")!!, s.str("secret")!!, s.long("t")!!))
        }
    }

    @Test
    fun v2HmacAndAes() {
        val v = TestKit.vectors("v2.json")
        for (h in objs(v, "hmac")) {
            val params = h.list("params").map { Json.asList(it)!!.let { p -> p[0] as String to p[1] as String } }
            val canonical = Signing.v2Canonical(params)
            assertEquals(h.str("canonical"), canonical)
            assertEquals(h.str("s"), Signing.v2Signature(h.str("secret")!!, canonical))
        }
        for (a in objs(v, "aes")) {
            val mode = a.long("mode")!!.toInt()
            val key = V2Cipher.key(a.str("key")!!)!!
            val sealed = V2Cipher.seal(mode, key, Codec.unhex(a.str("iv")!!)!!, a.str("plaintext")!!.toByteArray())
            assertEquals(a.str("sealed_hex"), Codec.hex(sealed))
            assertEquals(a.str("plaintext"), String(V2Cipher.open(mode, key, Codec.unhex(a.str("sealed_hex")!!)!!)))
            a.str("sealed_base64")?.let { assertEquals(it, Codec.base64(sealed)) }
        }
    }

    @Test
    fun configSignatures() {
        for (s in objs(TestKit.vectors("config_signatures.json"), "vectors")) {
            val msg = s.str("message")?.toByteArray(Charsets.UTF_8) ?: Codec.unhex(s.str("message_hex")!!)!!
            assertEquals(s.bool("valid"), Ed25519.verifyBase64(s.str("public_key")!!, msg, s.str("signature")!!), s.str("source"))
        }
    }

    private fun expectAnswer(expected: Map<String, Any?>, got: ServiceAnswer?) {
        assertNotNull(got)
        assertEquals(expected.strings("ips"), got!!.ips)
        assertEquals(expected.long("ttl"), got.ttl)
    }

    @Test
    fun answers() {
        val v = TestKit.vectors("answers.json")
        for (r in objs(v, "resolve")) {
            val got = Answers.parseResolve(r.str("body")!!)[r.str("host")!!]
            expectAnswer(r, got)
            assertEquals(r.str("client_isp"), got!!.clientIsp)
            assertEquals(r.obj("ip_isp"), got.ipIsp)
        }
        for (r in objs(v, "resolve_batch")) {
            val got = Answers.parseResolve(r.str("body")!!)
            for ((host, e) in r.obj("answers")!!) expectAnswer(Json.asObject(e)!!, got[host])
        }
        for (bad in v.strings("malformed_resolve")) {
            assert(runCatching { Answers.parseResolve(bad) }.isFailure) { bad }
        }
        for (r in objs(v, "d")) {
            val got = Answers.parseD(r.str("body")!!, r.strings("asked"))
            for ((host, e) in r.obj("answers")!!) expectAnswer(Json.asObject(e)!!, got[host])
        }
        for (r in objs(v, "v2")) {
            val got = Answers.parseV2Data(r.obj("data")!!)
            for ((host, e) in r.obj("answers")!!) expectAnswer(Json.asObject(e)!!, got[host])
        }
        for (f in objs(v, "filter")) {
            val ips = f.strings("ips").map { IpFilter.parse(it)!! }
            @Suppress("UNCHECKED_CAST")
            val r = IpFilter.filter(ips, f.bool("allow_private")!!, f.str("client_isp"), f.obj("labels") as Map<String, String>)
            assertEquals(f.strings("kept"), r.kept.map { IpFilter.text(it) })
            assertEquals(f.long("dropped")!!.toInt(), r.dropped.size)
        }
    }

    @Test
    fun convergence() {
        val v = TestKit.vectors("convergence.json")
        val doc = ConfigDocument.parse(Json.write(v.obj("document")))
        val dev = v.str("deviceId")!!
        assertEquals(v.strings("host_list"), Convergence.hostList(doc, dev))
        for (c in objs(v, "cases")) {
            val got = Convergence.converge(doc, dev, c.str("url")!!.toHttpUrl())
            if (c.bool("converged") == false) {
                assertNull(got, c.str("url"))
                continue
            }
            assertNotNull(got, c.str("url"))
            assertEquals(c.str("path_and_query"), got!!.pathAndQuery, c.str("url"))
            for ((host, url) in c.obj("on_hosts")!!) assertEquals(url, got.onHost(host).toString(), "${c.str("url")} on $host")
        }
        val sw = v.obj("switch")!!
        val swDoc = ConfigDocument.parse(Json.write(sw.obj("document")))
        for (d in objs(sw, "devices")) {
            val id = d.str("deviceId")!!
            assertEquals(d.bool("enabled"), swDoc.convergenceEnabled(id), id)
            assertEquals(d.strings("host_list"), Convergence.hostList(swDoc, id), id)
        }
    }

    /**
     * `resolution.json`: the server's per-device decision as the SDK reads it, and the SDK's own
     * decision from `default` and `segments` where it decides alone (no server answer).
     */
    @Test
    fun resolutionPolicy() {
        val v = TestKit.vectors("resolution.json")
        val policy = v.obj("policy")
        var alone = 0
        for (c in objs(v, "cases")) {
            val server = ResolutionDecision.parse(c)!!
            assertEquals(c.bool("httpdns"), server.httpdns, c.toString())
            assertEquals(c.bool("localDnsFallback"), server.localDnsFallback, c.toString())
            assertEquals(c.long("timeoutMs"), server.timeoutMs, c.toString())
            assertEquals(c.long("bucket"), Buckets.bucket(Buckets.HTTPDNS_RATE_KEY, c.str("deviceId")!!))
            if (c.bool("clientDecides") == true) {
                val own = ResolutionDecision.fromPolicy(policy, c.str("segment"), c.str("deviceId")!!)!!
                assertEquals(c.bool("httpdns"), own.httpdns, c.toString())
                assertEquals(c.bool("localDnsFallback"), own.localDnsFallback, c.toString())
                assertEquals(c.long("timeoutMs"), own.timeoutMs, c.toString())
                alone++
            }
        }
        assertEquals(48, alone)
    }
}

class CarriersTest {
    @Test
    fun simOperatorsMapToTheServersLabels() {
        assertEquals("mobile", Carriers.of("46000"))
        assertEquals("unicom", Carriers.of("46001"))
        assertEquals("telecom", Carriers.of("46011"))
        assertNull(Carriers.of("310260"))
        assertNull(Carriers.of(null))
    }
}
