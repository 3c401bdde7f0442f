# Run with cmake -P at build time: installs the dashboard's chart library from
# SOURCE/package-lock.json with `npm ci` into WORK (again only when the lock file
# changed), then has esbuild bundle SOURCE/charts.js with uPlot into
# OUT_DIR/charts.js and OUT_DIR/charts.css, which EmbedFiles puts in the binary.
# NPM: the npm to run. If npm or esbuild fails (no registry), the build goes on
# with a stand-in charts.js that tells the pages why they have no charts, and a
# warning that says why and how to retry; the rest of xmod does not depend on it.
function(stand_in why)
  message(WARNING "The dashboard is built WITHOUT its charts: ${why}\n"
                  "Tables and the JSON endpoints work; to retry, delete ${OUT_DIR} and build again.")
  string(REGEX REPLACE "['\\\\]" "" why_js "${why}")
  string(REGEX REPLACE "[\r\n]+" " " why_js "${why_js}")
  file(WRITE "${OUT_DIR}/charts.js"
       "// xmod was built without the dashboard's chart bundle.\n"
       "window.XmodChartsMissing = 'this xmod was built without its chart assets: ${why_js}';\n")
  file(WRITE "${OUT_DIR}/charts.css" "/* no chart bundle */\n")
endfunction()
file(MAKE_DIRECTORY "${WORK}")
file(SHA256 "${SOURCE}/package-lock.json" want)
set(have "")
if(EXISTS "${WORK}/installed.sha256")
  file(READ "${WORK}/installed.sha256" have)
endif()
if(NOT have STREQUAL want OR NOT EXISTS "${WORK}/node_modules/.bin/esbuild")
  file(COPY "${SOURCE}/package.json" "${SOURCE}/package-lock.json" DESTINATION "${WORK}")
  execute_process(COMMAND "${NPM}" ci --no-audit --no-fund
                  WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE rc
                  OUTPUT_FILE "${WORK}/npm.log" ERROR_FILE "${WORK}/npm.log")
  if(NOT rc EQUAL 0)
    file(STRINGS "${WORK}/npm.log" log)
    list(LENGTH log n)
    math(EXPR from "${n} - 6")
    if(from LESS 0)
      set(from 0)
    endif()
    list(SUBLIST log ${from} -1 tail)
    list(JOIN tail " | " tail)
    stand_in("'npm ci' in ${WORK} failed (${rc}; does this machine reach the npm registry?): ${tail}")
    return()
  endif()
  file(WRITE "${WORK}/installed.sha256" "${want}")
endif()
file(COPY "${SOURCE}/charts.js" DESTINATION "${WORK}")
execute_process(COMMAND "${WORK}/node_modules/.bin/esbuild" "${WORK}/charts.js" --bundle --minify
                        --format=iife --log-level=warning "--outfile=${OUT_DIR}/charts.js"
                WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  stand_in("esbuild failed (${rc}): ${err}")
endif()
