/**
 * LakeVilla for Jupyter: SQL highlighting of `%%lvtxn` and `%%lvsql` cells in JupyterLab 4.
 *
 * JupyterLab gives every code cell the kernel's language (IPython). This plugin adds a CodeMirror 6
 * extension to code-cell editors (through IEditorExtensionRegistry) that watches the cell's first line:
 * while it starts with `%%lvtxn` or `%%lvsql`, a language of our own takes precedence over IPython. That
 * language parses the first line as a magic header and hands the rest of the cell (the body) to the
 * SQL parser of @codemirror/lang-sql (a Spark SQL flavoured dialect), so JupyterLab's highlight style
 * colours the body as SQL. Other cells are left alone; editing the first line switches either way.
 */

import type { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { EditorExtensionRegistry, IEditorExtensionRegistry } from '@jupyterlab/codemirror';
import { SQLDialect } from '@codemirror/lang-sql';
import { Language, defineLanguageFacet, languageDataProp } from '@codemirror/language';
import { Compartment, EditorState, Extension, Prec, Text } from '@codemirror/state';
import { EditorView, ViewPlugin } from '@codemirror/view';
import { Input, NodeSet, NodeType, Parser, PartialParse, Tree, TreeFragment, parseMixed } from '@lezer/common';
import { styleTags, tags } from '@lezer/highlight';

/** The cell magics whose body is SQL. */
export const SQL_MAGICS = ['%%lvtxn', '%%lvsql'];

/** True when a cell whose first line is `line` holds SQL (`%%lvtxn ...`, `%%lvsql`, not `%%lvtxnx`). */
export function isSqlMagicLine(line: string): boolean {
  const head = line.trimStart();
  return SQL_MAGICS.some(m => head.startsWith(m) && (head.length === m.length || /\s/.test(head[m.length])));
}

// Spark SQL's keywords (Spark 4 and Delta Lake statements; the words LakeVilla's SQL layer runs), grouped by use.
// A dialect's keyword list replaces lang-sql's default one, so the standard words are here too.
const SPARK_KEYWORDS = [
  // queries
  'select distinct all from where group by having order sort cluster distribute limit offset union ' +
    'intersect except minus as on using join inner outer left right full cross semi anti natural lateral ' +
    'view with recursive values window over partition rows range between unbounded preceding following ' +
    'current row qualify pivot unpivot for tablesample asc desc nulls first last',
  // expressions
  'and or not in is like ilike rlike regexp escape exists any some case when then else end cast try_cast ' +
    'interval distinct div array map struct named_struct filter respect ignore within',
  // changes
  'insert into overwrite update set delete merge matched source target upsert replace truncate',
  // definitions
  'create alter drop table tables temporary temp view views database databases schema schemas namespace ' +
    'namespaces function functions column columns add rename to if exists partitioned partitions ' +
    'clustered sorted buckets stored location comment tblproperties dbproperties options using format ' +
    'identity generated always default constraint check primary key foreign references',
  // information, maintenance (Delta Lake) and the session
  'show describe desc extended formatted detail history explain analyze compute statistics optimize ' +
    'zorder vacuum retain hours dry run restore version timestamp of cache uncache lazy refresh msck ' +
    'repair recover clone shallow deep use set reset',
  // transactions (LakeVilla's SQL layer)
  'begin start commit rollback transaction work isolation level read write only atomic'
].join(' ');

const SPARK_TYPES =
  'array binary bigint boolean byte char date dec decimal double float int integer long map numeric ' +
  'real short smallint string struct timestamp timestamp_ltz timestamp_ntz tinyint varchar variant void';

const SPARK_BUILTINS =
  'abs avg ceil coalesce collect_list collect_set concat count current_date current_timestamp date_add ' +
  'date_format explode first_value floor greatest if ifnull lag last_value lead least length lower max min ' +
  'now nullif nvl posexplode rank round row_number size split substr substring sum trim upper';

/** A Spark SQL flavour of @codemirror/lang-sql (backquoted identifiers, backslash escapes, "strings"). */
export const sparkSql = SQLDialect.define({
  keywords: SPARK_KEYWORDS,
  types: SPARK_TYPES,
  builtin: SPARK_BUILTINS,
  identifierQuotes: '`',
  backslashEscapes: true,
  doubleQuotedStrings: true
});

// -- the cell's outer syntax: a magic header line, then the SQL body ------------------------------------

const data = defineLanguageFacet({ commentTokens: { line: '--' } });

const nodeTypes = [
  NodeType.none,
  NodeType.define({ id: 1, name: 'LvSqlCell', top: true, props: [[languageDataProp, data]] }),
  NodeType.define({ id: 2, name: 'MagicHeader' }),
  NodeType.define({ id: 3, name: 'MagicName' }),
  NodeType.define({ id: 4, name: 'MagicArgs' }),
  NodeType.define({ id: 5, name: 'SqlBody' })
];
const nodeSet = new NodeSet(nodeTypes).extend(
  styleTags({ MagicName: tags.processingInstruction, MagicArgs: tags.meta })
);
const [, CELL, HEADER, NAME, ARGS, BODY] = nodeSet.types;

/** The header/body split of one parse: no work to spread over time, it finishes on the first call. */
class CellParse implements PartialParse {
  parsedPos: number;
  stoppedAt: number | null = null;

  constructor(
    private readonly input: Input,
    private readonly from: number,
    private readonly to: number
  ) {
    this.parsedPos = from;
  }

  advance(): Tree {
    const { from } = this;
    const to = this.stoppedAt ?? this.to;
    let eol = from;
    while (eol < to) {
      const chunk = this.input.chunk(eol);
      const at = chunk.indexOf('\n');
      if (at >= 0) {
        eol = Math.min(to, eol + at);
        break;
      }
      eol = Math.min(to, eol + Math.max(1, chunk.length));
    }
    const header = this.input.read(from, eol);
    const lead = header.length - header.trimStart().length;
    const nameEnd = lead + (header.slice(lead).search(/\s|$/) as number);
    const parts: Tree[] = [new Tree(NAME, [], [], nameEnd - lead)];
    const offsets: number[] = [lead];
    if (header.length > nameEnd) {
      parts.push(new Tree(ARGS, [], [], header.length - nameEnd));
      offsets.push(nameEnd);
    }
    const children: Tree[] = [new Tree(HEADER, parts, offsets, header.length)];
    const positions: number[] = [0];
    const bodyFrom = Math.min(to, eol + 1);
    if (bodyFrom < to) {
      children.push(new Tree(BODY, [], [], to - bodyFrom));
      positions.push(bodyFrom - from);
    }
    this.parsedPos = to;
    return new Tree(CELL, children, positions, to - from);
  }

  stopAt(pos: number): void {
    this.stoppedAt = pos;
  }
}

/** The SQL parser runs on the body (and reuses its earlier trees there: parseMixed handles the fragments). */
const mountSql = parseMixed(node => (node.type === BODY ? { parser: sparkSql.language.parser } : null));

class LvSqlCellParser extends Parser {
  createParse(
    input: Input,
    fragments: readonly TreeFragment[],
    ranges: readonly { from: number; to: number }[]
  ): PartialParse {
    const from = ranges.length ? ranges[0].from : 0;
    const to = ranges.length ? ranges[ranges.length - 1].to : input.length;
    return mountSql(new CellParse(input, from, to), input, fragments, ranges);
  }
}

/** The language of a `%%lvtxn` / `%%lvsql` cell. */
export const lvSqlCellLanguage = new Language(data, new LvSqlCellParser(), [], 'lakevilla-sql-cell');

// -- the switch: our language while the first line names a SQL magic -------------------------------------

const CELL_CLASS = 'lv-sql-cell';
const active: Extension = Prec.highest([
  lvSqlCellLanguage.extension,
  EditorView.editorAttributes.of({ class: CELL_CLASS })
]);
const sqlSwitch = new Compartment();

function wanted(doc: Text): Extension {
  return isSqlMagicLine(doc.line(1).text) ? active : [];
}

/** Keeps the compartment in step with the first line, in the same transaction as the edit. */
const followFirstLine = EditorState.transactionExtender.of(tr => {
  if (!tr.docChanged) {
    return null;
  }
  const next = wanted(tr.newDoc);
  return sqlSwitch.get(tr.startState) === next ? null : { effects: sqlSwitch.reconfigure(next) };
});

/** For an editor whose document was not the model's source when the extension was made. */
const checkOnStart = ViewPlugin.define(view => {
  if (sqlSwitch.get(view.state) !== wanted(view.state.doc)) {
    queueMicrotask(() => {
      const next = wanted(view.state.doc);
      if (sqlSwitch.get(view.state) !== next) {
        view.dispatch({ effects: sqlSwitch.reconfigure(next) });
      }
    });
  }
  return {};
});

/** The editor extension for one code cell whose source is `source` now. */
export function sqlCellExtension(source: string): Extension {
  return [sqlSwitch.of(wanted(Text.of(source.split('\n')))), followFirstLine, checkOnStart];
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'lakevilla-jupyterlab-sql:plugin',
  description: 'SQL highlighting of %%lvtxn and %%lvsql cell bodies',
  autoStart: true,
  requires: [IEditorExtensionRegistry],
  activate: (_app: JupyterFrontEnd, registry: IEditorExtensionRegistry): void => {
    registry.addExtension({
      name: 'lakevilla-jupyterlab-sql:cells',
      factory: ({ model }) => {
        // Code cells only (notebooks, consoles): markdown and raw cells keep their own language.
        if ((model as { type?: string }).type !== 'code') {
          return null;
        }
        return EditorExtensionRegistry.createImmutableExtension(sqlCellExtension(model.sharedModel.getSource()));
      }
    });
  }
};

export default plugin;
