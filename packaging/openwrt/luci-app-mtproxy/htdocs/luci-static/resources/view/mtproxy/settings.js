// settings.js: LuCI form over /etc/config/mtproxy (section main), the UCI config /etc/init.d/mtproxy turns into mtproxy.conf.
'use strict';
'require view';
'require form';

// Value forms the init script's generator (mtproxy-uci-gen.sh) accepts; mtproxy --check-config
// has the last word when the service starts.
var SIZE = /^[0-9]+([bB]|[kKmMgG]([iI]?[bB])?)?$/;
var DURATION = /^[0-9]+(ms|s|m|h)?$/;
var SECRET = /^[A-Za-z0-9_.-]+:[0-9A-Za-z_-]+$/;
var DC = /^-?[0-9]+ [\][A-Za-z0-9.:%_-]+$/;
var LISTEN = /^[\][A-Za-z0-9.:%_-]+$/;
var ADTAG = /^[0-9a-fA-F]{32}$/;
var PATH = /^\/[A-Za-z0-9._\/-]+$/;

function matches(re, what) {
	return function(section_id, value) {
		if (value == null || value === '' || re.test(value))
			return true;
		return _('Expecting %s').format(what);
	};
}

// A tri-state on/off: unset means mtproxy's own default (dflt), shown as the initial state.
function onoff(s, tab, name, title, descr, dflt) {
	var o = s.taboption(tab, form.Flag, name, title, descr);
	o.default = dflt ? '1' : '0';
	o.rmempty = true;
	return o;
}

function text(s, tab, name, title, descr, placeholder, validate) {
	var o = s.taboption(tab, form.Value, name, title, descr);
	if (placeholder != null)
		o.placeholder = placeholder;
	if (validate)
		o.validate = validate;
	o.rmempty = true;
	return o;
}

return view.extend({
	render: function() {
		var m, s, o;

		m = new form.Map('mtproxy', _('MTProto proxy'),
			_('A proxy for Telegram. Give users the links on the Status tab; open the port ' +
			  'in the firewall (a rule from the wan zone) for them to reach it.'));

		s = m.section(form.NamedSection, 'main', 'mtproxy');
		s.addremove = false;
		s.tab('general', _('General'));
		s.tab('secrets', _('Users and secrets'));
		s.tab('fronting', _('Fronting'));
		s.tab('tuning', _('Memory and limits'));
		s.tab('middle', _('Ad tag (middle proxy)'));
		s.tab('advanced', _('Advanced'));

		// General
		o = s.taboption('general', form.Flag, 'enabled', _('Enable'));
		o.rmempty = false;
		o = s.taboption('general', form.Value, 'port', _('Port'),
			_('Clients connect to this TCP port on every IPv4 address (ports below 1024 need user root).'));
		o.datatype = 'port';
		o.placeholder = '8443';
		o.rmempty = false;
		onoff(s, 'general', 'ipv6', _('IPv6'), _('Also listen on [::] at the same port.'), false);
		o = s.taboption('general', form.DynamicList, 'listen', _('Listen addresses'),
			_('Explicit ADDRESS:PORT entries instead of the port above, e.g. 192.168.1.1:8443 or [::]:8443.'));
		o.validate = matches(LISTEN, _('ADDRESS:PORT'));
		text(s, 'general', 'public_host', _('Public host'),
			_('Host name or address users reach this router at: it goes into the links.'),
			'router.example.org', matches(/^[A-Za-z0-9.:_-]+$/, _('a host name or address')));
		o = text(s, 'general', 'public_port', _('Public port'),
			_('Port put into the links when users reach another port than the one listened on (port forwarding). 0 = the listen port.'), '0');
		o.datatype = 'range(0,65535)';
		o = s.taboption('general', form.ListValue, 'log_level', _('Log level'));
		o.value('error'); o.value('warn'); o.value('info'); o.value('debug');
		o.default = 'info';
		text(s, 'general', 'log', _('Log'),
			_('stderr (the system log through procd), syslog, or a file path.'), 'stderr',
			matches(/^(stderr|syslog|\/[^\s"\\]+)$/, _('stderr, syslog or an absolute path')));
		text(s, 'general', 'metrics', _('Metrics endpoint'),
			_('ADDRESS:PORT of mtproxy\'s HTTP counters (/stats); the Status tab shows them. Keep it on 127.0.0.1.'),
			'127.0.0.1:9100', matches(LISTEN, _('ADDRESS:PORT')));
		o = text(s, 'general', 'metrics_token', _('Metrics token'),
			_('Required by the endpoint when set (the Status tab sends it). mtproxy refuses an endpoint on another address than 127.0.0.1 without one.'),
			'', matches(/^[A-Za-z0-9._~-]+$/, _('letters, digits and . _ ~ -')));
		o.password = true;
		onoff(s, 'general', 'metrics_public', _('Metrics without a token'),
			_('Allow the endpoint on a non-loopback address without a token: anyone who reaches it sees every user\'s traffic.'), false);

		// Users and secrets
		o = s.taboption('secrets', form.DynamicList, 'secret', _('Secrets'),
			_('One per user as NAME:SECRET. Make a secret on the router with <code>mtproxy generate-secret</code> ' +
			  '(<code>--dd</code> for padded, <code>--tls DOMAIN</code> for FakeTLS). With none, mtproxy generates one ' +
			  'into the state file.'));
		o.validate = matches(SECRET, _('NAME:SECRET'));
		onoff(s, 'secrets', 'allow_plain', _('Plain clients'), _('Serve obfuscated2 clients without padding.'), true);
		onoff(s, 'secrets', 'allow_dd', _('Padded (dd) clients'), _('Serve padded clients outside TLS.'), true);
		onoff(s, 'secrets', 'allow_ee', _('FakeTLS (ee) clients'), _('Serve FakeTLS clients. With only this on, the proxy is TLS-only.'), true);
		text(s, 'secrets', 'state_file', _('State file'),
			_('Keeps the generated secret; the links are written next to it (+ .links). On flash, it survives reboots.'),
			'/etc/mtproxy/mtproxy.state', matches(/^\/\S+$/, _('an absolute path')));
		text(s, 'secrets', 'user', _('Run as user'),
			_('Created by the package; ports below 1024 need root.'), 'mtproxy',
			matches(/^[A-Za-z0-9_.-]+$/, _('a user name')));

		// Fronting
		onoff(s, 'fronting', 'mask', _('Fronting'),
			_('Forward anything that is not a client (a browser, a censor\'s probe) to the real web server.'), true);
		text(s, 'fronting', 'mask_host', _('Fronting domain'),
			_('The server to front to. Default: the domain of the FakeTLS (ee) secret.'),
			'www.example.com', matches(/^[A-Za-z0-9.:_-]+$/, _('a host name or address')));
		o = text(s, 'fronting', 'mask_port', _('Fronting port'), null, '443');
		o.datatype = 'port';

		// Memory and limits (the router profile's defaults, as the generator applies them)
		o = text(s, 'tuning', 'workers', _('Workers'), _('Event loops (threads); 0 = one per core.'), '1');
		o.datatype = 'uinteger';
		o = text(s, 'tuning', 'max_connections', _('Max connections'), _('Each takes two descriptors.'), '512');
		o.datatype = 'uinteger';
		text(s, 'tuning', 'block_size', _('Block size'), _('Relay buffer block.'), '8k', matches(SIZE, _('a size such as 8k')));
		text(s, 'tuning', 'max_buffer', _('Max buffer'), _('Per direction per connection.'), '32k', matches(SIZE, _('a size such as 32k')));
		text(s, 'tuning', 'buffer_memory', _('Buffer memory'), _('Cap on all relay buffers.'), '8M', matches(SIZE, _('a size such as 8M')));
		text(s, 'tuning', 'replay_cache', _('Replay cache'), _('Memory for the replay cache; 0 turns it off.'), '1M', matches(SIZE, _('a size such as 1M')));
		o = text(s, 'tuning', 'backlog', _('Listen backlog'), null, '1024');
		o.datatype = 'uinteger';
		text(s, 'tuning', 'handshake_timeout', _('Handshake timeout'), null, '10s', matches(DURATION, _('a duration such as 10s')));
		text(s, 'tuning', 'connect_timeout', _('DC connect timeout'), null, '5s', matches(DURATION, _('a duration such as 5s')));
		text(s, 'tuning', 'idle_timeout', _('Idle timeout'), null, '5m', matches(DURATION, _('a duration such as 5m')));
		text(s, 'tuning', 'tcp_keepalive', _('TCP keepalive'), null, '60s', matches(DURATION, _('a duration such as 60s')));
		text(s, 'tuning', 'sndbuf', _('Socket send buffer'), _('0 = the kernel\'s default.'), '0', matches(SIZE, _('a size')));
		text(s, 'tuning', 'rcvbuf', _('Socket receive buffer'), _('0 = the kernel\'s default.'), '0', matches(SIZE, _('a size')));

		// Advanced
		onoff(s, 'advanced', 'fast_mode', _('Fast mode'),
			_('The DC encrypts downloads as the client expects: no AES in the proxy for them (see mtproxy.conf(5) for the trade-off).'), true);
		onoff(s, 'advanced', 'splice', _('Splice'), _('Move fast-mode bytes socket to socket with splice(2).'), true);
		onoff(s, 'advanced', 'tcp_nodelay', _('TCP_NODELAY'), null, true);
		o = text(s, 'advanced', 'dc_pool', _('DC pool'), _('Ready DC connections kept per DC and worker.'), '1');
		o.datatype = 'uinteger';
		onoff(s, 'advanced', 'dc_builtin', _('Built-in DC addresses'), _('Telegram\'s published production DC addresses.'), true);
		o = text(s, 'advanced', 'default_dc', _('Default DC'), _('Used when a client asks for an unknown id.'), '2');
		o.datatype = 'integer';
		onoff(s, 'advanced', 'prefer_ipv6', _('Prefer IPv6 to DCs'), null, false);
		onoff(s, 'advanced', 'only_ipv4', _('Only IPv4 to DCs'), null, false);
		o = s.taboption('advanced', form.DynamicList, 'dc', _('DC addresses'),
			_('Extra Telegram DC addresses as \'ID ADDRESS:PORT\'.'));
		o.validate = matches(DC, _('ID ADDRESS:PORT'));

		// Middle-proxy mode: the ad tag shows the operator's promoted channel; it needs
		// Telegram's two files, which mtproxy-update-config fetches (cron entry).
		text(s, 'middle', 'ad_tag', _('Ad tag'),
			_('32 hex digits from @MTProxybot. Setting it sends every client through Telegram\'s middle proxies.'),
			null, matches(ADTAG, _('32 hex digits')));
		text(s, 'middle', 'proxy_secret_file', _('Proxy secret file'),
			_('Telegram\'s proxy secret (getProxySecret), as fetched by mtproxy-update-config.'),
			'/etc/mtproxy/proxy-secret', matches(PATH, _('an absolute path')));
		text(s, 'middle', 'proxy_config_file', _('Proxy config file'),
			_('Telegram\'s proxy config (getProxyConfig), as fetched by mtproxy-update-config.'),
			'/etc/mtproxy/proxy-multi.conf', matches(PATH, _('an absolute path')));
		o = text(s, 'middle', 'me_pool', _('Links per middle proxy'), _('Per worker.'), '2');
		o.datatype = 'uinteger';
		text(s, 'middle', 'me_client_buffer', _('Bytes queued toward one client'),
			_('Past it that client alone is closed as slow.'), '4M', matches(SIZE, _('a size')));
		text(s, 'middle', 'me_request_buffer', _('Bytes queued toward the ME per client'),
			_('Past it the client is not read until its link drains.'), '256k', matches(SIZE, _('a size')));
		text(s, 'middle', 'me_link_buffer', _('Undelivered bytes per link'),
			_('Past it the link is not read until its clients drain.'), '8M', matches(SIZE, _('a size')));
		text(s, 'middle', 'me_ping_interval', _('Link health-check interval'), null, '10s',
			matches(DURATION, _('a duration such as 10s')));

		return m.render();
	}
});
